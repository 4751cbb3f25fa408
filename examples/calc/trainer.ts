/**
 * The calc demo's `Trainer`: the runners as concurrent tasks of this process (the shared-memory strategy,
 * the algorithm on the main thread) and the policy server as its LLM proxy. Shared by train.ts (Node: a
 * libSQL store, a listening policy server) and examples/tab/loop.ts (a browser tab: the in-memory store,
 * the policy server answered in-process). Imports nothing runtime-specific.
 */
import { Trainer, type TrainerOptions } from "../../src/trainer/trainer.ts";

export interface CalcTrainerOptions extends Pick<TrainerOptions, "algorithm" | "llmProxy" | "store" | "watchdogIntervalSeconds"> {
  runners: number;
  /** Seconds between a runner's heartbeats (0: none). */
  heartbeatInterval: number;
}

export function calcTrainer(o: CalcTrainerOptions): Trainer {
  const { runners, heartbeatInterval, ...rest } = o;
  return new Trainer({
    ...rest,
    nRunners: runners,
    strategy: { type: "shm", main_thread: "algorithm" },
    runner: { type: "LitAgentRunner", poll_interval: 0.01, heartbeat_interval: heartbeatInterval },
  });
}
