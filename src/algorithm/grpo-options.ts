/** GRPO's options, the base of the PPO family's (ppo-options.ts); defaults in brackets. */
import type { AggregationLevel, Grouping, Triplet } from "../adapter/index.ts";
import type { PolicyLossOptions, PolicyTrainer } from "../model/train-types.ts";
import type { ValueTrainer } from "../model/value-types.ts";
import type { ModelPolicy } from "../proxy/policy.ts";
import type { Kernels } from "../wasm/index.ts";
import type { Span } from "../types/span.ts";
import type { GrpoReport } from "./ppo-reports.ts";

/** Agent Lightning's `trace_aggregator` option: what becomes a training row (docs/adapters.md#the-training-batch). */
export interface TraceAggregatorOptions {
  /** "transition": one row per LLM call; "trajectory": one row per run of calls whose context extends the
   * previous call's, the tokens between the model's replies (tool results, chat scaffolding) masked out of
   * the loss ["transition"]. */
  level?: AggregationLevel;
}

export interface GrpoOptions {
  /** The policy trainer (GPU or CPU); its parameters are the policy being trained. */
  trainer: PolicyTrainer;
  /** The policy the server serves; updated after every step. */
  policy: ModelPolicy;
  /** Training steps [20]. */
  steps?: number;
  /** Tasks per step [16]. */
  batchSize?: number;
  /** Rollouts per task: the GRPO group size [8]. */
  nSamples?: number;
  /** Validate every k steps (and before the first and after the last); 0: only before and after [5]. */
  valEvery?: number;
  maxPromptLength: number;
  maxResponseLength: number;
  /** What becomes a training row (Agent Lightning's `trace_aggregator.level`): each LLM call, or each
   * rollout's chain of calls with the tool results and chat scaffolding masked out [{ level: "transition" }]. */
  traceAggregator?: TraceAggregatorOptions;
  /** Rows sharing a baseline: same sample and turn index, or same sample ["sample_turn"]. */
  grouping?: Grouping;
  /** Sampling temperature of training rollouts [1.0]; validation uses `valTemperature` [0]. */
  temperature?: number;
  valTemperature?: number;
  /** Learning rate of each step [the trainer's]. */
  lr?: number;
  /** Learning rate of step `step` (1-based) of `steps`; overrides `lr` (e.g. a late decay that keeps the gains of the early steps). */
  lrSchedule?: (step: number, steps: number) => number;
  /** Rows per forward/backward pass; gradients accumulate over them up to one update [all]. */
  microBatchSize?: number;
  /** Rows per optimizer update (PPO mini-batch) [all kept rows: one update per epoch]. */
  miniBatchSize?: number;
  /** Passes over each step's rows (PPO epochs) [1]. */
  ppoEpochs?: number;
  /** Report the KL to the base (`kl_ref`) even when `loss.klLossCoef` is 0 (one more forward per step;
   * LoRA trainers only) [false]. */
  trackKl?: boolean;
  /** PPO loss options (clip ratios, aggregation, entropy bonus). */
  loss?: PolicyLossOptions;
  /** Divide group-centred rewards by the group std (verl's `norm_adv_by_std_in_grpo`) [true]. */
  normByStd?: boolean;
  /** Leave rows of all-equal-reward groups out of the update [true]. */
  dropTiedGroups?: boolean;
  /** A rollout at or above this reward counts as correct in `accuracy` [1]. */
  successReward?: number;
  /** Reward of a rollout without one [0]. */
  rewardFillna?: number;
  /** Built-in checkpoints: `<checkpointDir>/step-N`, the critic's in its `critic` folder [none]. */
  checkpointDir?: string | null;
  /** Steps between checkpoints (the last step always writes one when checkpointDir is set) [10]. */
  checkpointEvery?: number;
  /** Seed of the task order and of the mini-batch shuffles [0]. */
  seed?: number;
  /** Steps already taken (resuming): the loop starts at step `startStep + 1` with the task order a fresh
   * run would have there [0]. */
  startStep?: number;
  /** Writes the trainer's state, and the critic's when there is one, after step `step` (instead of the built-in
   * checkpoints under checkpointDir). */
  saveCheckpoint?: (step: number, trainer: PolicyTrainer, critic: ValueTrainer | null) => Promise<void>;
  /** Give up on a batch of rollouts after this many seconds [600]. */
  rolloutTimeoutSeconds?: number;
  /** Print a progress line per step and per validation [true]. */
  progress?: boolean;
  /** Stops the run early: the step in progress when it aborts is the last one (validated and checkpointed as
   * the last step is), and `run` returns normally. */
  signal?: AbortSignal;
  /** Called after each step and validation. */
  onReport?: (report: GrpoReport) => void;
  kernels?: Kernels;
  /** Spans to triplets [LlmProxyTraceToTriplet, which reads the policy server's LLM-call spans]. */
  adapter?: { adapt(spans: Span[]): Triplet[] };
}
