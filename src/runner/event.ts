/**
 * `ExecutionEvent`: the stop flag shared by an algorithm and its runners (upstream's threading/multiprocessing
 * Event). Setting it wakes every waiter at once.
 */
export interface ExecutionEvent {
  set(): void;
  clear(): void;
  isSet(): boolean;
  /** Resolves true once set, or false when `timeoutSeconds` passes first (null/undefined: no limit). */
  wait(timeoutSeconds?: number | null): Promise<boolean>;
}

export class LocalEvent implements ExecutionEvent {
  private flag = false;
  private waiters = new Set<() => void>();

  set(): void {
    if (this.flag) return;
    this.flag = true;
    const ws = this.waiters;
    this.waiters = new Set();
    for (const w of ws) w();
  }

  clear(): void {
    this.flag = false;
  }

  isSet(): boolean {
    return this.flag;
  }

  wait(timeoutSeconds?: number | null): Promise<boolean> {
    if (this.flag) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      let timer: ReturnType<typeof setTimeout> | null = null;
      const done = () => {
        if (timer !== null) clearTimeout(timer);
        resolve(true);
      };
      this.waiters.add(done);
      if (timeoutSeconds !== null && timeoutSeconds !== undefined) {
        timer = setTimeout(
          () => {
            this.waiters.delete(done);
            resolve(this.flag);
          },
          Math.max(0, timeoutSeconds * 1000),
        );
      }
    });
  }

  /** An AbortSignal that aborts when this event is set. */
  toSignal(): AbortSignal {
    const ac = new AbortController();
    if (this.flag) ac.abort();
    else this.waiters.add(() => ac.abort());
    return ac.signal;
  }
}

/**
 * Sleeps `seconds`, returning early (true) as soon as `event` is set or `signal` aborts, or (false) as
 * soon as `wake` resolves.
 */
export function sleepUnlessStopped(
  seconds: number,
  event?: ExecutionEvent | null,
  signal?: AbortSignal | null,
  wake?: Promise<unknown>,
): Promise<boolean> {
  if (event?.isSet() || signal?.aborted) return Promise.resolve(true);
  return new Promise<boolean>((resolve) => {
    let finished = false;
    const finish = (stopped: boolean) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      resolve(stopped);
    };
    const onAbort = () => finish(true);
    const timer = setTimeout(() => finish(false), Math.max(0, seconds * 1000));
    signal?.addEventListener("abort", onAbort, { once: true });
    // The event's own timeout equals ours, so its timer never outlives this sleep by more than a tick.
    if (event) void event.wait(seconds).then((set) => set && finish(true));
    void wake?.then(() => finish(false));
  });
}
