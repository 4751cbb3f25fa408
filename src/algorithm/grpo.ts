/**
 * GRPO (docs/training.md#grpo): the PPO family (ppo.ts) with `advEstimator: "grpo"` and no critic, the
 * training loop of Lightning TS. Its steps are `grpo.step` spans under a `grpo-metrics` bookkeeping rollout.
 */
import type { GrpoOptions } from "./grpo-options.ts";
import { PPO } from "./ppo.ts";
import type { PpoOptions } from "./ppo-options.ts";

export { combineMetrics, selectRows } from "./grpo-step.ts";
export type { GrpoOptions, TraceAggregatorOptions } from "./grpo-options.ts";
export { saveTrainerCheckpoint } from "./ppo.ts";
export type { GrpoReport, StepReport, ValidationReport } from "./ppo-reports.ts";

/** GRPO: `new PPO(options)` with GRPO's estimator (no critic), under GRPO's name. */
export class GRPO extends PPO {
  constructor(o: GrpoOptions & Omit<PpoOptions, "advEstimator" | "critic">) {
    super({ ...o, advEstimator: "grpo" }, "grpo");
  }
}

/** A learning-rate factor: 1 until the last `share` of the steps, then linear down to `final` at the last
 * step (a late decay keeps what the early steps gained). */
export function lateDecay(step: number, steps: number, share: number, final: number): number {
  const start = steps * (1 - share);
  if (step <= start || steps <= start) return 1;
  return 1 - (1 - final) * ((step - start) / (steps - start));
}
