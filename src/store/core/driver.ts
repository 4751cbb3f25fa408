/**
 * The transaction driver: runs a transaction body (a generator, see `TxBody`) inside one storage
 * transaction, synchronously over a synchronous backend (memory) and asynchronously over an
 * asynchronous one (SQL).
 */
import type { Clock } from "../../types/index.ts";
import type { MaybePromise, Storage, StorageTx, TxMode } from "../storage.ts";

/**
 * A transaction body. It yields the result of each `StorageTx` call (a value or a promise) and gets
 * the value back: `const r: Rollout | null = yield t.getRollout(id)`. `drive` resumes it at once on a
 * value and waits only on a promise, so over a synchronous backend (memory) a whole transaction runs
 * without one microtask, promise or async frame, while an asynchronous one (SQL) is awaited as before.
 * (The yielded value is typed `any`: each `yield` names its type where it is assigned.)
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type TxBody<T> = Generator<unknown, T, any>;

/** What every transaction body sees as `this`: one object per store, so bodies stay module functions. */
export interface TxContext {
  readonly clock: Clock;
}

/** Side effects to run once a transaction has committed. */
export interface Effects {
  finished: string[];
  /** A rollout was put back in the queue (requeued). */
  queued?: boolean;
}

export const isThenable = <T>(v: T | PromiseLike<T>): v is PromiseLike<T> =>
  typeof v === "object" && v !== null && typeof (v as { then?: unknown }).then === "function";

/** Runs a body to its end: synchronously while it yields values, then asynchronously from its first promise. */
export function drive<T>(body: TxBody<T>): MaybePromise<T> {
  let r = body.next();
  while (!r.done) {
    if (isThenable(r.value)) return driveAsync(body, r.value);
    r = body.next(r.value);
  }
  return r.value;
}

async function driveAsync<T>(body: TxBody<T>, pending: PromiseLike<unknown>): Promise<T> {
  for (;;) {
    let r: IteratorResult<unknown, T>;
    let value: unknown;
    let failed = false;
    try {
      value = await pending;
    } catch (e) {
      failed = true;
      value = e;
    }
    // A rejected storage call is thrown inside the body, where it may be caught.
    r = failed ? body.throw(value) : body.next(value);
    while (!r.done && !isThenable(r.value)) r = body.next(r.value);
    if (r.done) return r.value;
    pending = r.value as PromiseLike<unknown>;
  }
}

/** Opens transactions on one storage for the bodies of one store. */
export class TxDriver {
  constructor(
    private readonly storage: Storage,
    private readonly ctx: TxContext,
  ) {}

  /**
   * Runs a transaction body (a generator function of `core/`, see `TxBody`) with its arguments:
   * through the storage's `txSync` when it has one, else its `tx`.
   */
  tx<T, A extends unknown[]>(mode: TxMode, body: (this: TxContext, t: StorageTx, ...args: A) => TxBody<T>, ...args: A): MaybePromise<T> {
    if (this.storage.txSync !== undefined) return this.storage.txSync(mode, (t) => drive(body.call(this.ctx, t, ...args)) as T);
    return this.storage.tx(mode, (t) => drive(body.call(this.ctx, t, ...args)));
  }

  /** A transaction of a single storage call (nothing to drive). */
  call<T>(mode: TxMode, fn: (t: StorageTx) => MaybePromise<T>): MaybePromise<T> {
    if (this.storage.txSync !== undefined) return this.storage.txSync(mode, fn as (t: StorageTx) => T);
    return this.storage.tx(mode, fn);
  }
}
