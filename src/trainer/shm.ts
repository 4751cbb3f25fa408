/**
 * `SharedMemoryExecutionStrategy` (alias `shm`): the algorithm and every runner as
 * concurrent tasks on one event loop, sharing the store object. The stores are async-safe, so the
 * "managed" lock facade of upstream has nothing to do here; `managedStore` is accepted and ignored.
 */
import type { LightningStore } from "../store/base.ts";
import { LocalEvent } from "../runner/event.ts";
import { getLogger } from "../platform/log.ts";
import { ValidationError } from "../types/index.ts";
import { resolveBoolEnv } from "../types/env.ts";
import { onInterrupt } from "./interrupt.ts";
import { ExecutionStrategy, runUntilCompletedOrCanceled, type AlgorithmBundle, type RunnerBundle } from "./strategy.ts";

const log = getLogger("agentlightning.execution.shared_memory");

export interface SharedMemoryOptions {
  nRunners?: number;
  /** Which side the caller awaits: "runner" (default, needs nRunners == 1) or "algorithm". */
  mainThread?: "algorithm" | "runner";
  /** Seconds to wait for background tasks after stop before abandoning them (default 15). */
  joinTimeout?: number;
  /** Seconds a bundle gets after stop before it is aborted, and again before it is abandoned (default 5). */
  gracefulDelay?: number;
  pollInterval?: number;
  managedStore?: boolean | null;
}

export class SharedMemoryExecutionStrategy extends ExecutionStrategy {
  static readonly acceptedOptions = ["nRunners", "mainThread", "joinTimeout", "gracefulDelay", "pollInterval", "managedStore"] as const;
  override nRunners: number;
  readonly mainThread: "algorithm" | "runner";
  readonly joinTimeout: number;
  readonly gracefulDelay: number;
  readonly pollInterval: number;
  readonly managedStore: boolean;

  constructor(o: SharedMemoryOptions = {}) {
    super();
    this.nRunners = o.nRunners ?? 1;
    this.mainThread = o.mainThread ?? "runner";
    this.joinTimeout = o.joinTimeout ?? 15.0;
    this.gracefulDelay = o.gracefulDelay ?? 5.0;
    this.pollInterval = o.pollInterval ?? 0.05;
    this.managedStore = resolveBoolEnv("AGL_MANAGED_STORE", o.managedStore, true);
    if (this.mainThread !== "algorithm" && this.mainThread !== "runner") {
      throw new ValidationError(`mainThread must be 'algorithm' or 'runner', got '${String(this.mainThread)}'`, ["mainThread"]);
    }
    if (this.mainThread === "runner" && this.nRunners !== 1) {
      throw new ValidationError("mainThread='runner' requires nRunners to be 1; use mainThread='algorithm' for several runners", [
        "nRunners",
      ]);
    }
    if (!(Number.isInteger(this.nRunners) && this.nRunners >= 1))
      throw new ValidationError("nRunners must be an integer >= 1", ["nRunners"]);
  }

  override async execute(algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore): Promise<void> {
    const event = new LocalEvent();
    const background: { name: string; done: Promise<unknown>; finished: boolean }[] = [];
    const errors: unknown[] = [];
    const startBackground = (name: string, body: (signal: AbortSignal) => Promise<void>) => {
      const entry = { name, finished: false, done: Promise.resolve() as Promise<unknown> };
      entry.done = runUntilCompletedOrCanceled(name, body, event, this.gracefulDelay)
        .catch((err: unknown) => {
          log.error(`${name} failed`, err);
          errors.push(err);
          event.set();
        })
        .finally(() => (entry.finished = true));
      background.push(entry);
    };
    const stopInterrupt = onInterrupt(() => event.set());
    try {
      if (this.mainThread === "algorithm") {
        for (let i = 0; i < this.nRunners; i++) startBackground(`runner-${i}`, (signal) => runner(store, i, event, signal));
        try {
          await runUntilCompletedOrCanceled("algorithm", (signal) => algorithm(store, event, signal), event, this.gracefulDelay);
        } finally {
          // The algorithm is done (or failed): the runners stop.
          event.set();
        }
      } else {
        // When the algorithm is done, so are the runners (otherwise a runner without maxRollouts polls forever).
        startBackground("algorithm", (signal) => algorithm(store, event, signal).finally(() => event.set()));
        try {
          await runUntilCompletedOrCanceled("runner-0", (signal) => runner(store, 0, event, signal), event, this.gracefulDelay);
        } catch (err) {
          event.set();
          throw err;
        }
        // The runner is done; the algorithm finishes on its own.
        await background[0]!.done;
      }
    } finally {
      stopInterrupt();
      await this.join(background);
    }
    if (errors.length > 0) throw errors[0];
  }

  private async join(tasks: { name: string; done: Promise<unknown>; finished: boolean }[]): Promise<void> {
    if (tasks.length === 0) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([Promise.all(tasks.map((t) => t.done)), new Promise((r) => (timer = setTimeout(r, this.joinTimeout * 1000)))]);
    clearTimeout(timer);
    const alive = tasks.filter((t) => !t.finished).map((t) => t.name);
    if (alive.length > 0) log.warn(`Threads still alive after ${this.joinTimeout}s: ${alive.join(", ")}; abandoning them`);
  }
}
