/**
 * Execution strategies: how the algorithm and the runners are laid out. Bundles are
 * the two halves a Trainer hands over; each gets the stop event and an AbortSignal that the strategy
 * aborts when a bundle overstays the graceful delay after stop.
 */
import type { LightningStore } from "../store/base.ts";
import { AbortError, NotImplementedError } from "../runner/errors.ts";
import type { ExecutionEvent } from "../runner/event.ts";
import { getLogger } from "../platform/log.ts";

const log = getLogger("agentlightning.execution");

export type AlgorithmBundle = (store: LightningStore, event: ExecutionEvent, signal: AbortSignal) => Promise<void>;
export type RunnerBundle = (store: LightningStore, workerId: number, event: ExecutionEvent, signal: AbortSignal) => Promise<void>;

export abstract class ExecutionStrategy {
  /** How many runners the strategy starts (the Trainer syncs its own count from this). */
  nRunners?: number;
  execute(_algorithm: AlgorithmBundle, _runner: RunnerBundle, _store: LightningStore): Promise<void> {
    throw new NotImplementedError("ExecutionStrategy.execute must be implemented by a subclass");
  }
}

type Settled<T> = { ok: true; value: T } | { ok: false; error: unknown };

const settle = <T>(p: Promise<T>): Promise<Settled<T>> =>
  p.then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error }),
  );

const within = <T>(p: Promise<T>, seconds: number): Promise<T | null> => {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([p, new Promise<null>((r) => (timer = setTimeout(() => r(null), seconds * 1000)))]).finally(() =>
    clearTimeout(timer),
  );
};

/**
 * Runs a bundle until it completes or, after the stop event, until it has had `gracefulDelay` to
 * finish by itself; then aborts its signal and gives it another `gracefulDelay` before abandoning it.
 * Returns its value, or null when it was cancelled or abandoned; other errors are re-thrown.
 */
export async function runUntilCompletedOrCanceled<T>(
  name: string,
  bundle: (signal: AbortSignal) => Promise<T>,
  stop: ExecutionEvent,
  gracefulDelay: number,
): Promise<T | null> {
  const controller = new AbortController();
  const task = settle(Promise.resolve().then(() => bundle(controller.signal)));
  const unwrap = (r: Settled<T>): T | null => {
    if (r.ok) return r.value;
    if (r.error instanceof AbortError) {
      log.info(`${name} was cancelled`);
      return null;
    }
    throw r.error;
  };
  const first = await Promise.race([task, stop.wait().then(() => null)]);
  if (first !== null) return unwrap(first);
  const graceful = await within(task, gracefulDelay);
  if (graceful !== null) {
    log.info(`${name}: Bundle finished by itself during grace period`);
    return unwrap(graceful);
  }
  log.info(`${name}: Graceful delay elapsed; canceling bundle task...`);
  controller.abort(new AbortError(`${name} cancelled`));
  const afterCancel = await within(task, gracefulDelay);
  if (afterCancel === null) {
    log.warn(`${name} did not stop after cancellation; abandoning task`);
    return null;
  }
  return unwrap(afterCancel);
}
