/**
 * A FIFO async mutex: JS is single-threaded, but an async operation that awaits between its steps
 * can interleave with another one; holding this across the steps makes them atomic.
 */
export class AsyncMutex {
  private locked = false;
  private readonly waiting: (() => void)[] = [];
  private head = 0;

  /** True while a call holds the lock. */
  get busy(): boolean {
    return this.locked;
  }

  /**
   * Runs `fn` under the lock. Not an async function on purpose: an uncontended call runs `fn` at once
   * and adds only one `then` to its promise (no extra async frames or ticks on the store's hot path).
   */
  run<T>(fn: () => T | Promise<T>): Promise<T> {
    if (this.locked) return new Promise<void>((resolve) => this.waiting.push(resolve)).then(() => this.runLocked(fn));
    this.locked = true;
    return this.runLocked(fn);
  }

  private runLocked<T>(fn: () => T | Promise<T>): Promise<T> {
    let out: T | Promise<T>;
    try {
      out = fn();
    } catch (e) {
      this.release();
      return Promise.reject(e);
    }
    // Any thenable holds the lock until it settles (not only this realm's Promise).
    if (typeof (out as { then?: unknown } | null)?.then !== "function") {
      this.release();
      return Promise.resolve(out);
    }
    return Promise.resolve(out).then(
      (v) => {
        this.release();
        return v;
      },
      (e: unknown) => {
        this.release();
        throw e;
      },
    );
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
