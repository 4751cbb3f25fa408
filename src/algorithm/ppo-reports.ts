/** What the PPO family's loop reports after each step and each validation (docs/training.md#what-a-step-reports). */

export interface ValidationReport {
  kind: "validation";
  step: number;
  reward: number;
  accuracy: number;
  n: number;
}

export interface StepReport {
  kind: "step";
  step: number;
  version: number;
  reward: number;
  accuracy: number;
  /** Share of groups (two rollouts or more) whose rewards were all equal. */
  zero_variance_group_share: number;
  rows: number;
  trained_rows: number;
  /** Attended tokens (prompt + response) of the batch's rows and of the trained rows; tokens of the
   * trained rows under the loss mask (the model's own). */
  tokens: number;
  trained_tokens: number;
  loss_tokens: number;
  /** PPO KL (old - new log-prob, masked mean), averaged over the step's updates. */
  kl: number;
  /** KL of the rollout policy to the base, in the loss's `klLossType` (LoRA trainers; 0 when not computed). */
  kl_ref: number;
  /** Optimizer updates taken (epochs x mini-batches) and those skipped as non-finite. */
  updates: number;
  skipped_updates: number;
  clip_frac: number;
  entropy: number;
  grad_norm: number;
  loss: number;
  /** Response tokens trained per second of policyStep. */
  train_tokens_per_second: number;
  /** Response tokens sampled per second of the rollout phase (wall time, agents included). */
  rollout_tokens_per_second: number;
  seconds: number;
  skipped: boolean;
  /** The step's metrics under verl's names: `critic/score/mean`, `critic/advantages/mean`, `actor/pg_loss`,
   * `critic/vf_loss`, `actor/reward_kl_penalty`, ... (docs/training.md#what-a-step-reports). */
  metrics: Record<string, number>;
}

export type PpoReport = ValidationReport | StepReport;
/** GRPO's name for the same reports. */
export type GrpoReport = PpoReport;
