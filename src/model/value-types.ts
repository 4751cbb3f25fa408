/**
 * The critic's API (verl's `critic`): a value model — a decoder of the policy's architecture (or a smaller
 * one) whose last hidden state goes through a scalar value head instead of the LM head — that predicts
 * V(s_t) for every response token, and is trained on the returns with verl's clipped value loss
 * (docs/training.md). The GAE estimator reads its values; the PPO algorithm updates it before the actor.
 *
 * Value tensors cover the response columns only, [B, R], like log-probs (docs/adapters.md#the-training-batch).
 */
import type { ModelConfig } from "./config.ts";
import type { LossAggMode, OptimizerState, StepOptions, TokenBatch } from "./train-types.ts";

export interface ValueStepOptions extends StepOptions {
  /** verl's `critic.cliprange_value`: the new value may move at most this far from the old one [0.5]. */
  cliprangeValue?: number;
  /** Aggregation of the per-token value loss [token-mean]. */
  lossAggMode?: LossAggMode;
}

export interface ValueStepMetrics {
  /** 0.5 * agg(max((v - R)^2, (clip(v, old ± ε) - R)^2)) (verl's `critic/vf_loss`). */
  vf_loss: number;
  /** Share of response tokens where the clipped term was the larger (verl's `critic/vf_clipfrac`). */
  vf_clipfrac: number;
  /** Masked mean of the predicted values (verl's `critic/vpred_mean`). */
  vpred_mean: number;
  /** Global gradient L2 norm before clipping (verl's `critic/grad_norm`). */
  grad_norm: number;
  /** Response tokens in the step. */
  tokens: number;
  /** True when the step was skipped (parameters untouched): loss or gradient not finite. */
  skipped: boolean;
  /** The critic optimizer's step count after this call. */
  step: number;
}

export interface ValueTrainerState {
  config: ModelConfig;
  /** Flat parameters: the decoder's, then the value head's. */
  params: Float32Array;
  optimizer: OptimizerState;
}

/** A critic on one backend (CPU or WebGPU), the counterpart of {@link PolicyTrainer}. */
export interface ValueTrainer {
  readonly config: ModelConfig;
  readonly backend: "cpu" | "webgpu";
  /** [B, R] V(s_t) of each response token of the batch's rows (0 off the response mask). */
  values(batch: TokenBatch, options?: StepOptions): Promise<Float32Array>;
  /** One optimizer step of the clipped value loss towards `returns` ([B, R]), clipped around `oldValues`. */
  valueStep(batch: TokenBatch, returns: Float32Array, oldValues: Float32Array, options?: ValueStepOptions): Promise<ValueStepMetrics>;
  getState(): Promise<ValueTrainerState>;
  setState(state: ValueTrainerState): Promise<void>;
}
