/**
 * A FIFO async mutex: JS is single-threaded, but an async operation that awaits between its steps
 * can interleave with another one; holding this across the steps makes them atomic.
 */
export class AsyncMutex {
  private locked = false;
  private readonly waiting: (() => void)[] = [];
  private head = 0;

  async run<T>(fn: () => T | Promise<T>): Promise<T> {
    if (this.locked) await new Promise<void>((resolve) => this.waiting.push(resolve));
    else this.locked = true;
    try {
      return await fn();
    } finally {
      this.release();
    }
  }

  /** Hands the lock straight to the next waiter (it stays locked), so no newcomer can jump the queue. */
  private release(): void {
    if (this.head < this.waiting.length) {
      const next = this.waiting[this.head]!;
      this.waiting[this.head++] = undefined as never;
      if (this.head > 1024 && this.head * 2 > this.waiting.length) {
        this.waiting.splice(0, this.head);
        this.head = 0;
      }
      next();
    } else {
      this.locked = false;
      this.waiting.length = 0;
      this.head = 0;
    }
  }
}
