/**
 * Options of the PPO-family algorithm (verl's agent-mode PPO trainer; docs/training.md): GRPO's options
 * plus the advantage estimator, the KL in the reward with its controller, and the critic. GRPO is this
 * algorithm with `advEstimator: "grpo"` and no critic; its defaults stay GRPO's.
 * Field names are verl's config keys in camelCase (docs/training.md#config has the key-by-key table).
 */
import type { KlLossType } from "../model/train-types.ts";
import type { ValueTrainer } from "../model/value-types.ts";
import type { GrpoOptions } from "./grpo-options.ts";

/** verl's `algorithm.adv_estimator`. */
export type AdvantageEstimator =
  | "gae"
  | "grpo"
  | "grpo_passk"
  | "rloo"
  | "opo"
  | "gpg"
  | "reinforce_plus_plus"
  | "reinforce_plus_plus_baseline"
  | "remax";

/** verl's `algorithm.kl_ctrl`: a fixed coefficient, or one adapted towards `targetKl` over `horizon` samples. */
export interface KlControllerOptions {
  /** ["fixed"] */
  type?: "fixed" | "adaptive";
  /** The (initial) coefficient β [0.001]. */
  klCoef?: number;
  /** adaptive: the KL the controller steers towards [0.1]. */
  targetKl?: number;
  /** adaptive: samples over which β moves by at most ±20 % per unit of error [10000]. */
  horizon?: number;
}

export interface CriticOptions {
  /** The value model (GAE needs one). */
  trainer: ValueTrainer;
  /** verl's `critic.cliprange_value` [0.5]. */
  cliprangeValue?: number;
  /** verl's `critic.optim.lr` [the critic trainer's]. */
  lr?: number;
  /** verl's `critic.ppo_epochs` [the actor's ppoEpochs]. */
  ppoEpochs?: number;
  /** verl's `critic.ppo_mini_batch_size`, in rows [the actor's miniBatchSize]. */
  miniBatchSize?: number;
  /** verl's `critic.ppo_micro_batch_size_per_gpu`, in rows [the actor's microBatchSize]. */
  microBatchSize?: number;
  /** verl's `critic.loss_agg_mode` [the actor's]. */
  lossAggMode?: import("../model/train-types.ts").LossAggMode;
}

export interface PpoOptions extends GrpoOptions {
  /** ["grpo"] */
  advEstimator?: AdvantageEstimator;
  /** GAE and REINFORCE++ discount γ [1.0]. */
  gamma?: number;
  /** GAE λ [1.0]. */
  lam?: number;
  /** grpo_passk / pass@k: none extra; rloo/opo/gpg: none extra. */
  /** Subtract β·KL(π_rollout ‖ π_ref) from the token-level reward (verl's `use_kl_in_reward`) [false]. */
  useKlInReward?: boolean;
  /** The KL estimator of the reward penalty (verl's `algorithm.kl_penalty`) [kl]. */
  klPenalty?: KlLossType;
  klCtrl?: KlControllerOptions;
  /** GAE's value model; required when advEstimator is "gae". */
  critic?: CriticOptions;
  /** Steps that train only the critic before the actor starts (verl's `trainer.critic_warmup`) [0]. */
  criticWarmup?: number;
  /** Agent Lightning's rounding to the mini-batch: leave out a random remainder of rows so each update's rows
   * are a multiple of its mini-batch size (actor: `miniBatchSize`, critic: `critic.miniBatchSize`); by default the
   * remainder is a smaller last mini-batch [false]. */
  dropRemainder?: boolean;
  /** Write each step's prompts, responses, rewards and advantages here as `<step>.jsonl` (verl's `trainer.rollout_data_dir`) [none]. */
  rolloutDataDir?: string | null;
}
