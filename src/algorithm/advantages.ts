/**
 * verl's `compute_advantage`: the advantages and returns of a batch by `algorithm.adv_estimator`, each
 * estimator a kernel of the Wasm core (docs/training.md#advantage-estimators).
 */
import { ValidationError } from "../types/errors.ts";
import type { AdvantageOutput, Kernels } from "../wasm/index.ts";
import type { AdvantageEstimator } from "./ppo-options.ts";

export const ADVANTAGE_ESTIMATORS: readonly AdvantageEstimator[] = [
  "gae",
  "grpo",
  "grpo_passk",
  "rloo",
  "opo",
  "gpg",
  "reinforce_plus_plus",
  "reinforce_plus_plus_baseline",
  "remax",
];

export interface EstimatorInput {
  /** token_level_rewards [B, T] (the scores, minus β·KL with the KL in the reward). */
  rewards: Float32Array;
  /** response_mask [B, T] (0/1). */
  mask: Float32Array;
  /** Dense group id of each row [B]. */
  groups: Int32Array;
  B: number;
  T: number;
  /** gae: the critic's values [B, T]. */
  values?: Float32Array;
  /** remax: the reward of the greedy rollout of each row's task [B]. */
  baselines?: Float32Array;
}

export interface EstimatorOptions {
  /** gae, reinforce_plus_plus [1]. */
  gamma?: number;
  /** gae [1]. */
  lam?: number;
  /** grpo, grpo_passk: divide by the group std (false: Dr. GRPO) [true]. */
  normByStd?: boolean;
}

/** Throws a ValidationError naming `advEstimator` unless `name` is one of verl's estimators. */
export function checkEstimator(name: string): asserts name is AdvantageEstimator {
  if (!(ADVANTAGE_ESTIMATORS as readonly string[]).includes(name))
    throw new ValidationError(`advEstimator must be one of ${ADVANTAGE_ESTIMATORS.join(", ")}, got ${JSON.stringify(name)}`, [
      "advEstimator",
    ]);
}

/** Advantages and returns ([B, T], in fresh JS memory) of `estimator` on `x`. */
export function computeAdvantages(
  kernels: Kernels,
  estimator: AdvantageEstimator,
  x: EstimatorInput,
  o: EstimatorOptions = {},
): AdvantageOutput {
  checkEstimator(estimator);
  const gamma = o.gamma ?? 1;
  const lam = o.lam ?? 1;
  const out = (() => {
    switch (estimator) {
      case "grpo":
        return kernels.grpo(x, o.normByStd ?? true);
      case "grpo_passk":
        return kernels.grpoPassk(x, o.normByStd ?? true);
      case "rloo":
        return kernels.rloo(x);
      case "opo":
        return kernels.opo(x);
      case "gpg":
        return kernels.gpg(x);
      case "reinforce_plus_plus_baseline":
        return kernels.reinforcePlusPlusBaseline(x);
      case "reinforce_plus_plus":
        return kernels.reinforcePlusPlus(x, gamma);
      case "gae":
        if (!x.values) throw new ValidationError("the gae estimator needs the critic's values", ["critic"]);
        return kernels.gae({ ...x, values: x.values }, gamma, lam);
      case "remax":
        if (!x.baselines) throw new ValidationError("the remax estimator needs the greedy baseline rewards", ["baselines"]);
        return kernels.remax({ ...x, baselines: x.baselines });
    }
  })();
  // group estimators return one array for both; the Wasm outputs are views, valid until the next kernel call
  const advantages = out.advantages.slice();
  return { advantages, returns: out.returns === out.advantages ? advantages : out.returns.slice() };
}
