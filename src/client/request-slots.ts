/**
 * At most `size` requests of one client in flight; the rest wait their turn in order. A client that
 * fires hundreds of calls at once would otherwise open a connection for each (the global fetch keeps
 * no per-origin cap), and the server holds one address to `--max-connections-per-address`
 * (docs/server.md); Python's aiohttp and httpx clients cap their pools at 100 the same way.
 */
export class RequestSlots {
  private free: number;
  private readonly queue: Array<() => void> = [];

  constructor(readonly size: number) {
    if (!Number.isInteger(size) || size < 1) throw new RangeError(`maxConcurrentRequests must be a positive integer, got ${size}`);
    this.free = size;
  }

  /** Runs `work` in a slot: waits for one first (or rejects with the signal's reason when it aborts meanwhile). */
  async run<T>(signal: AbortSignal | undefined, work: () => Promise<T>): Promise<T> {
    await this.acquire(signal);
    try {
      return await work();
    } finally {
      this.release();
    }
  }

  private acquire(signal: AbortSignal | undefined): Promise<void> {
    signal?.throwIfAborted();
    if (this.free > 0) {
      this.free--;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const granted = () => {
        signal?.removeEventListener("abort", aborted);
        resolve();
      };
      const aborted = () => {
        const at = this.queue.indexOf(granted);
        if (at >= 0) this.queue.splice(at, 1);
        reject(signal!.reason);
      };
      signal?.addEventListener("abort", aborted, { once: true });
      this.queue.push(granted);
    });
  }

  private release(): void {
    const next = this.queue.shift();
    // The slot passes straight to the next waiter; `free` only grows when no one waits.
    if (next) next();
    else this.free++;
  }
}
