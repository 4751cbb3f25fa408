/**
 * Types shared by every policy-trainer backend: the CPU fallback (`src/cpu/trainer.ts`) and the WebGPU
 * trainer (`src/gpu/trainer.ts`) expose the same {@link PolicyTrainer} API and the same math, so the
 * GRPO loop does not care which one runs.
 *
 * Batch layout follows verl (docs/adapters.md#the-training-batch): rows are `prompt (left-padded, P) ++ response
 * (right-padded, R)`, `T = P + R`; per-token training tensors (advantages, old log-probs, response
 * mask, the log-probs returned by `logProbs`) cover only the last R columns, [B, R].
 */
import type { LoraConfig } from "./lora.ts";
import type { ModelConfig } from "./config.ts";
import type { KlLossType } from "../wasm/types.ts";

export type { KlLossType };

/** 0/1 masks may come as any integer or float typed array. */
export type MaskArray = Int32Array | Uint8Array | Float32Array;

/**
 * A padded token batch. Field names match the Wasm core's `BatchTensors` (src/wasm/types.ts), so its
 * batch layout output can be passed as it is.
 */
export interface TokenBatch {
  /** Number of rows (B). */
  n: number;
  /** Prompt columns (left-padded); P >= 1. */
  P: number;
  /** Response columns (right-padded), the last R of each row; R >= 1. Row width T = P + R. */
  R: number;
  /** [n, T] token ids. */
  inputIds: Int32Array;
  /** [n, T] 1 for real tokens, 0 for padding. */
  attentionMask: MaskArray;
  /** [n, T] rotary positions, `max(cumsum(attentionMask) - 1, 0)` per row. */
  positionIds: Int32Array;
  /** [n, R] tokens trained on; defaults to the last R columns of `attentionMask`. */
  responseMask?: MaskArray;
}

/** The four verl aggregation modes (docs/training.md#the-ppo-loss). */
export type LossAggMode = "token-mean" | "seq-mean-token-sum" | "seq-mean-token-mean" | "seq-mean-token-sum-norm";

/** verl's `actor.policy_loss.loss_mode` (docs/training.md#the-ppo-loss). */
export type PolicyLossMode = "vanilla" | "gspo" | "gpg" | "clip_cov" | "kl_cov" | "cispo";

/** PPO policy loss options, verl names in camelCase; defaults in brackets. */
export interface PolicyLossOptions {
  /** Which policy loss [vanilla: PPO clip with dual clip]. */
  lossMode?: PolicyLossMode;
  /** clip_cov: share of tokens whose gradient is cut [0.0002]; with `clipCovLb`/`clipCovUb` the covariance band [1, 5]. */
  clipCovRatio?: number;
  clipCovLb?: number;
  clipCovUb?: number;
  /** kl_cov: share of tokens given the KL penalty [0.0002], and its coefficient `ppoKlCoef` [0.1]. */
  klCovRatio?: number;
  ppoKlCoef?: number;
  /** ε for both sides when the one-sided values are absent [0.2]. */
  clipRatio?: number;
  /** ε_low [clipRatio]. */
  clipRatioLow?: number;
  /** ε_high [clipRatio]. */
  clipRatioHigh?: number;
  /** Dual-clip constant c, must be > 1 [3.0]. */
  clipRatioC?: number;
  /** Aggregation [token-mean]. */
  lossAggMode?: LossAggMode;
  /** Objective subtracts `entropyCoeff * entropy_loss` [0]. */
  entropyCoeff?: number;
  /** With reference log-probs: adds `klLossCoef * agg(kl_penalty(logp, ref, klLossType))` [0.001 in verl; 0 here unless set]. */
  klLossCoef?: number;
  /** [low_var_kl]. */
  klLossType?: KlLossType;
}

/** AdamW with decoupled weight decay and bias correction, plus global grad-norm clipping. */
export interface OptimizerOptions {
  /** [1e-5] */
  lr?: number;
  /** [0.9] */
  beta1?: number;
  /** [0.999] */
  beta2?: number;
  /** [1e-8] */
  eps?: number;
  /** Decoupled: `p -= lr * weightDecay * p` [0.01]. */
  weightDecay?: number;
  /** Clip the global L2 norm of the gradient to this value; 0 or Infinity disables [1.0]. */
  maxGradNorm?: number;
}

export interface StepOptions {
  /** Rows per forward/backward pass; gradients accumulate over micro-batches [all rows]. */
  microBatchSize?: number;
  /** Overrides the trainer's learning rate for this step (schedules). */
  lr?: number;
  /** LoRA trainers, `logProbs` only: the frozen base without the adapter (reference log-probs for a KL
   * term, with no second copy of the model) [false]. */
  baseOnly?: boolean;
}

/** Options of a pass that computes the policy's log-probs (`logProbs`, `policyStep`). */
export interface LogProbOptions extends StepOptions {
  /** The logits are divided by this before the log-softmax, as verl's actor does with the rollouts'
   * temperature: log-probs, entropies and gradients are then those of the distribution the rollouts were
   * sampled from. Must be > 0 [1]. */
  temperature?: number;
}

export interface PolicyStepOptions extends LogProbOptions, PolicyLossOptions {
  /** [B, R] reference-policy log-probs, needed when klLossCoef > 0. */
  refLogProbs?: Float32Array;
}

export interface SftStepOptions extends StepOptions {
  /** Aggregation of the per-token cross-entropy [token-mean]. */
  lossAggMode?: LossAggMode;
}

/** What one optimizer step reports. Aggregates follow the step's loss aggregation mode. */
export interface StepMetrics {
  /** The scalar objective (pg loss - entropy bonus + KL loss; cross-entropy for SFT). */
  loss: number;
  /** Policy-gradient part alone (equals `loss` for SFT). */
  pg_loss: number;
  /** Fraction of response tokens where the ratio clip was active (0 for SFT). */
  clip_frac: number;
  /** Fraction of response tokens where the dual clip was active (A < 0), (0 for SFT). */
  clip_frac_lower: number;
  /** verl's ppo_kl: masked mean of old - new log-prob (0 for SFT). */
  approx_kl: number;
  /** Aggregated entropy of the response tokens. */
  entropy: number;
  /** Global gradient L2 norm before clipping (NaN/Infinity when skipped for that reason). */
  grad_norm: number;
  /** Response tokens processed per second of wall time. */
  tokens_per_second: number;
  /** Response tokens in the step. */
  tokens: number;
  /** True when the step was skipped (parameters untouched) because loss or gradient was not finite. */
  skipped: boolean;
  /** The optimizer step count after this call. */
  step: number;
}

export interface LogProbsResult {
  /** [B, R] log-prob of each response token under the current policy. */
  log_probs: Float32Array;
  /** [B, R] entropy of the predicted distribution at each response token. */
  entropy: Float32Array;
}

/** AdamW state: first/second moments in the flat parameter layout, and the step count. */
export interface OptimizerState {
  step: number;
  m: Float32Array;
  v: Float32Array;
}

/** Everything needed to resume training bit-exactly. */
export interface TrainerState {
  config: ModelConfig;
  /** Flat parameters in `paramLayout(config)` order; for a LoRA trainer, the adapter's in `loraLayout` order. */
  params: Float32Array;
  optimizer: OptimizerState;
  /** Present for a LoRA trainer: the adapter's config (its base stays outside the state). */
  lora?: LoraConfig;
}

/** The backend-independent trainer API. */
export interface PolicyTrainer {
  readonly config: ModelConfig;
  readonly backend: "cpu" | "webgpu";
  /** The adapter's config when the trainer trains a LoRA adapter on a frozen base; null otherwise. */
  readonly loraConfig?: LoraConfig | null;
  logProbs(batch: TokenBatch, options?: LogProbOptions): Promise<LogProbsResult>;
  policyStep(batch: TokenBatch, advantages: Float32Array, oldLogProbs: Float32Array, options?: PolicyStepOptions): Promise<StepMetrics>;
  sftStep(batch: TokenBatch, options?: SftStepOptions): Promise<StepMetrics>;
  /** A copy of parameters and optimizer state (downloads from the device where there is one). */
  getState(): Promise<TrainerState>;
  /** Replaces parameters and optimizer state (config must match). */
  setState(state: TrainerState): Promise<void>;
}
