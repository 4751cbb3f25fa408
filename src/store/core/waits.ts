/**
 * Waits for rollouts to finish: who listens for which rollout, waking them once a transaction that
 * finished a rollout has committed, and `waitForRollouts` itself. Also who listens for the queue
 * (`onQueued`: idle runners), woken once a rollout was enqueued or requeued. Other processes writing the
 * same storage can be told of each such change (`onChange`) and wake their own waiters with it (`wake`).
 */
import type { Rollout } from "../../types/index.ts";
import { ValidationError, isTerminal } from "../../types/index.ts";
import type { WaitOptions } from "../base.ts";
import { requireId, stringList } from "../inputs.ts";
import type { MaybePromise } from "../storage.ts";
import type { Effects } from "./driver.ts";

/** What a wait needs from its store. */
export interface WaitSource {
  /** The healthcheck of a scanning call; undefined when no scan runs now. */
  healthcheck(): Promise<unknown> | undefined;
  /** The rows of `ids` now, null for an unknown id. */
  getRollouts(ids: readonly string[]): MaybePromise<(Rollout | null)[]>;
  /** True when the storage has other writers, whose commits this process is not told about. */
  readonly sharedWriters: boolean;
}

/** What a committed transaction may have woken: waits for these rollouts, and the queue's listeners. */
export interface StoreChange {
  /** Rollouts the transaction finished. */
  finished: readonly string[];
  /** Whether it enqueued or requeued a rollout. */
  queued: boolean;
}

export class Waits {
  private readonly waiters = new Map<string, Set<() => void>>();
  private readonly queueListeners = new Set<() => void>();
  private readonly changeListeners = new Set<(change: StoreChange) => void>();

  /** @param pollMs how often a wait re-reads when the storage has other writers. */
  constructor(private readonly pollMs: number) {}

  /** Wakes the waiters of every rollout `fx` finished, and the queue's listeners if it requeued one (call after the commit). */
  notifyFinished(fx: Effects): void {
    if (fx.finished.length === 0 && !fx.queued) return;
    this.changed({ finished: fx.finished, queued: fx.queued === true });
  }

  /**
   * Wakes this process's waiters for a change another process committed to the same storage (told by
   * that process's `onChange`); it is not passed on to this process's `onChange` listeners.
   */
  wake(change: StoreChange): void {
    for (const id of change.finished) {
      const set = this.waiters.get(id);
      if (set) for (const wake of [...set]) wake();
    }
    if (change.queued) for (const wake of [...this.queueListeners]) wake();
  }

  /** Calls `listener` after each commit of this process that finished a rollout or queued one; returns a remover. */
  onChange(listener: (change: StoreChange) => void): () => void {
    const own = (change: StoreChange) => listener(change);
    this.changeListeners.add(own);
    return () => void this.changeListeners.delete(own);
  }

  private changed(change: StoreChange): void {
    this.wake(change);
    for (const tell of [...this.changeListeners]) tell(change);
  }

  /** Calls `listener` each time a rollout was enqueued or requeued; returns a remover. */
  onQueued(listener: () => void): () => void {
    const own = () => listener();
    this.queueListeners.add(own);
    return () => void this.queueListeners.delete(own);
  }

  /** Wakes the queue's listeners (call after the commit that queued). */
  notifyQueued(): void {
    this.changed({ finished: [], queued: true });
  }

  /** Wakes waiters once an asynchronous transaction has committed. */
  async notifyAfter<T>(committed: PromiseLike<T>, fx: Effects): Promise<T> {
    const out = await committed;
    this.notifyFinished(fx);
    return out;
  }

  async waitForRollouts(store: WaitSource, options: WaitOptions): Promise<Rollout[]> {
    const ids = stringList(options?.rollout_ids, "rollout_ids");
    if (ids === null) throw new ValidationError("rollout_ids is required", ["rollout_ids"]);
    for (const id of ids) requireId(id, "rollout_ids");
    const timeout = options.timeout ?? null;
    if (timeout !== null && (typeof timeout !== "number" || Number.isNaN(timeout))) {
      throw new ValidationError("timeout must be a number of seconds or null", ["timeout"]);
    }
    const signal = options.signal;
    signal?.throwIfAborted();
    await store.healthcheck();

    const unique = [...new Set(ids)];
    const finishedNow = new Map<string, Rollout>();
    // Listen before the first read, so a completion between the read and the wait is not missed.
    const notified = new Set<string>(unique);
    let wake: (() => void) | null = null;
    const listeners = new Map<string, () => void>();
    for (const id of unique) {
      const fn = () => {
        notified.add(id);
        wake?.();
      };
      listeners.set(id, fn);
      let set = this.waiters.get(id);
      if (!set) this.waiters.set(id, (set = new Set()));
      set.add(fn);
    }
    const pending = new Set<string>(unique);
    const deadline = timeout === null ? null : Date.now() + Math.max(0, timeout) * 1000;
    let timer: ReturnType<typeof setTimeout> | null = null;
    let onAbort: (() => void) | null = null;
    try {
      for (;;) {
        const toRead = [...notified].filter((id) => pending.has(id));
        notified.clear();
        if (toRead.length > 0) {
          const rows = await store.getRollouts(toRead);
          toRead.forEach((id, i) => {
            const r = rows[i];
            // Unknown ids are left out at once; finished ones are done.
            if (!r) pending.delete(id);
            else if (isTerminal(r.status)) {
              pending.delete(id);
              finishedNow.set(id, r);
            }
          });
        }
        if (pending.size === 0 || (deadline !== null && Date.now() >= deadline)) break;
        if (notified.size > 0) continue;
        await new Promise<void>((resolve, reject) => {
          wake = resolve;
          const waitMs = deadline === null ? null : Math.max(0, deadline - Date.now());
          const pollMs = store.sharedWriters ? this.pollMs : null;
          const ms = waitMs === null ? pollMs : pollMs === null ? waitMs : Math.min(waitMs, pollMs);
          if (ms !== null) {
            timer = setTimeout(() => {
              if (pollMs !== null) for (const id of pending) notified.add(id);
              resolve();
            }, ms);
          }
          if (signal) {
            // It may have fired while we were reading: an abort event is not sent twice.
            if (signal.aborted) return reject(signal.reason);
            onAbort = () => reject(signal.reason);
            signal.addEventListener("abort", onAbort, { once: true });
          }
        }).finally(() => {
          wake = null;
          if (timer !== null) clearTimeout(timer);
          timer = null;
          if (signal && onAbort) signal.removeEventListener("abort", onAbort);
          onAbort = null;
        });
      }
    } finally {
      for (const [id, fn] of listeners) {
        const set = this.waiters.get(id);
        set?.delete(fn);
        if (set && set.size === 0) this.waiters.delete(id);
      }
    }
    // Read the finished ones again: a rollout restarted meanwhile (startAttempt) is not reported.
    const finalRows = await store.getRollouts([...finishedNow.keys()]);
    const done = new Map<string, Rollout>();
    for (const r of finalRows) if (r && isTerminal(r.status)) done.set(r.rollout_id, r);
    return ids.filter((id) => done.has(id)).map((id) => done.get(id)!);
  }
}
