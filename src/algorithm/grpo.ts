/**
 * GRPO (docs/training.md#grpo): the training loop of Lightning TS.
 *
 * Each step: publish the policy server as the `main_llm` resource (a ProxyLLM, so every runner's calls
 * carry the rollout/attempt routing prefix and land in the store with their token ids), enqueue each
 * task of the batch `nSamples` times with `metadata.data_id` and a `sampling_seed` from `seed` (so a seed
 * gives the same samples whatever order the runners' calls arrive in), wait for the rollouts, turn each one's
 * spans into triplets with the adapter, build the padded batch and the GRPO advantages in the Wasm
 * core, take one `policyStep` on the trainer (WebGPU or CPU), and serve the new weights as the next
 * policy version. Validation (temperature 0, one rollout per task) runs before the first step, every
 * `valEvery` steps and after the last; checkpoints are written every `checkpointEvery` steps.
 *
 * Rows of groups whose rewards are all equal have zero advantage and carry no policy gradient; they
 * are left out of the update (`dropTiedGroups`, as newer Agent Lightning prefers dropping them), which saves
 * their forward and backward passes. Token-mean aggregation then averages over the kept rows only.
 *
 * With `ppoEpochs` > 1 or a `miniBatchSize` below the kept rows, the old log-probs are computed once and
 * the rows are walked `ppoEpochs` times in shuffled mini-batches, one optimizer update each (PPO's
 * epochs and mini-batches; clip fraction and the PPO KL then measure how far the updates moved the
 * policy). Inside an update, `microBatchSize` rows go through each forward/backward and the gradients
 * accumulate. A LoRA trainer gives the KL reference for free: the base with the adapter switched off
 * (`logProbs(..., { baseOnly: true })`); the KL to it is computed in the Wasm core, reported as
 * `kl_ref`, and added to the loss with `loss.klLossCoef`. An update whose loss or gradient is not finite
 * is skipped by the trainer (weights untouched), counted in `skipped_updates` and logged.
 *
 * Metrics per step go to the console (a progress line) and to the store: each step is a
 * `grpo.step` span, each validation a `grpo.validation` span, under one `grpo` bookkeeping rollout.
 */
import { checkRowOptions, type FinishedRollout, type Grouping, type Triplet } from "../adapter/index.ts";
import { LlmProxyTraceToTriplet } from "../adapter/proxy-triplet.ts";
import { saveCheckpoint } from "../model/checkpoint.ts";
import { saveLoraCheckpoint } from "../model/hf/lora-checkpoint.ts";
import { Rng } from "../model/init.ts";
import type { PolicyLossOptions, PolicyTrainer } from "../model/train-types.ts";
import type { ModelPolicy } from "../proxy/policy.ts";
import type { PolicyServer } from "../proxy/policy-server.ts";
import { rolloutSamplingSeed, SAMPLING_SEED_KEY } from "../proxy/sampling-seed.ts";
import type { LightningStore } from "../store/base.ts";
import { getLogger } from "../platform/log.ts";
import type { Kernels } from "../wasm/index.ts";
import type { Attributes, Span } from "../types/span.ts";
import { RuntimeError } from "../runner/errors.ts";
import { ValidationError } from "../types/errors.ts";
import { Algorithm, batchIterOverDataset, withLlmProxy, type Dataset } from "./base.ts";
import { BookkeepingRollout } from "./bookkeeping.ts";
import { grpoUpdate, type TraceAggregatorOptions } from "./grpo-step.ts";

export { combineMetrics, selectRows, type TraceAggregatorOptions } from "./grpo-step.ts";

const log = getLogger("agentlightning.algorithm.grpo");

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
  checkpointDir?: string | null;
  /** Steps between checkpoints (the last step always writes one when checkpointDir is set) [10]. */
  checkpointEvery?: number;
  /** Seed of the task order and of the mini-batch shuffles [0]. */
  seed?: number;
  /** Steps already taken (resuming): the loop starts at step `startStep + 1` with the task order a fresh
   * run would have there [0]. */
  startStep?: number;
  /** Writes the trainer's state after step `step` (instead of the built-in checkpoints under checkpointDir). */
  saveCheckpoint?: (step: number, trainer: PolicyTrainer) => Promise<void>;
  /** Give up on a batch of rollouts after this many seconds [600]. */
  rolloutTimeoutSeconds?: number;
  /** Print a progress line per step and per validation [true]. */
  progress?: boolean;
  /** Called after each step and validation. */
  onReport?: (report: GrpoReport) => void;
  kernels?: Kernels;
  /** Spans to triplets [LlmProxyTraceToTriplet, which reads the policy server's LLM-call spans]. */
  adapter?: { adapt(spans: Span[]): Triplet[] };
}

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
}

export type GrpoReport = ValidationReport | StepReport;

/** The slice of a PolicyServer the loop uses. */
type PolicyEndpoint = Pick<PolicyServer, "asResource">;

type OptionalKeys =
  | "checkpointDir"
  | "onReport"
  | "kernels"
  | "lr"
  | "lrSchedule"
  | "microBatchSize"
  | "miniBatchSize"
  | "loss"
  | "adapter"
  | "saveCheckpoint";

const FINISHED = new Set(["succeeded", "failed", "cancelled"]);

function progressBar(done: number, total: number, width = 20): string {
  const filled = total > 0 ? Math.round((done / total) * width) : width;
  return `[${"#".repeat(filled)}${".".repeat(width - filled)}]`;
}

export class GRPO extends Algorithm {
  readonly options: Required<Omit<GrpoOptions, OptionalKeys>> & Pick<GrpoOptions, OptionalKeys>;
  /** Every report, in order. */
  readonly reports: GrpoReport[] = [];
  private metricsRollout: BookkeepingRollout | null = null;
  private shuffle = new Rng(0);

  constructor(o: GrpoOptions) {
    super();
    this.options = {
      steps: 20,
      batchSize: 16,
      nSamples: 8,
      valEvery: 5,
      temperature: 1,
      valTemperature: 0,
      normByStd: true,
      dropTiedGroups: true,
      successReward: 1,
      rewardFillna: 0,
      checkpointEvery: 10,
      seed: 0,
      startStep: 0,
      ppoEpochs: 1,
      trackKl: false,
      rolloutTimeoutSeconds: 600,
      progress: true,
      grouping: "sample_turn",
      ...o,
      traceAggregator: { level: "transition", ...o.traceAggregator },
    };
    checkRowOptions(this.options.traceAggregator.level ?? "transition", this.options.grouping, {
      level: ["traceAggregator", "level"],
      grouping: ["grouping"],
    });
    for (const k of ["steps", "batchSize", "nSamples", "ppoEpochs"] as const) {
      const v = this.options[k];
      if (!(Number.isInteger(v) && v >= 1)) throw new ValidationError(`${k} must be a positive integer, got ${v}`, [k]);
    }
    const mb = this.options.miniBatchSize;
    if (mb !== undefined && !(Number.isInteger(mb) && mb >= 1))
      throw new ValidationError(`miniBatchSize must be a positive integer, got ${mb}`, ["miniBatchSize"]);
    const start = this.options.startStep;
    if (!(Number.isInteger(start) && start >= 0 && start <= this.options.steps))
      throw new ValidationError(`startStep must be an integer in [0, steps], got ${start}`, ["startStep"]);
    const wantsRef = (this.options.loss?.klLossCoef ?? 0) !== 0 || this.options.trackKl;
    if (wantsRef && !this.options.trainer.loraConfig)
      throw new ValidationError(
        "a KL to the reference model needs a LoRA trainer (its base is the reference); full fine-tuning keeps no second copy",
        ["loss", "klLossCoef"],
      );
  }

  get validations(): ValidationReport[] {
    return this.reports.filter((r): r is ValidationReport => r.kind === "validation");
  }
  get steps(): StepReport[] {
    return this.reports.filter((r): r is StepReport => r.kind === "step");
  }

  async run(trainDataset?: Dataset<unknown> | null, valDataset?: Dataset<unknown> | null): Promise<void> {
    if (!trainDataset || trainDataset.length === 0) throw new ValidationError("GRPO needs a non-empty training dataset", ["train_dataset"]);
    await withLlmProxy(
      this,
      async (proxy) => {
        if (proxy === null || typeof (proxy as unknown as PolicyEndpoint).asResource !== "function")
          throw new RuntimeError("GRPO needs a PolicyServer as its LLM proxy (Trainer option llmProxy)");
        await this.loop(proxy as unknown as PolicyEndpoint, trainDataset, valDataset ?? null);
      },
      { required: true },
    );
  }

  private async loop(server: PolicyEndpoint, train: Dataset<unknown>, val: Dataset<unknown> | null): Promise<void> {
    const o = this.options;
    const store = this.getStore();
    const metrics = await BookkeepingRollout.start(store, { algorithm: "grpo", steps: o.steps }, "grpo-metrics");
    this.metricsRollout = metrics;
    let seed = o.seed >>> 0;
    const random = () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 4294967296;
    const batches = batchIterOverDataset(train, o.batchSize, random);
    // A resumed run sees the task order a fresh one would have from here on.
    for (let step = 1; step <= o.startStep; step++) batches.next();
    this.shuffle = new Rng(o.seed + 7919 * (o.startStep + 1));
    await metrics.around(async () => {
      if (val && o.startStep === 0) await this.validate(server, val, 0);
      for (let step = o.startStep + 1; step <= o.steps; step++) {
        await this.trainStep(server, batches.next().value as unknown[], step);
        const last = step === o.steps;
        if (val && (last || (o.valEvery > 0 && step % o.valEvery === 0))) await this.validate(server, val, step);
        if (last || step % o.checkpointEvery === 0) {
          if (o.saveCheckpoint) await o.saveCheckpoint(step, o.trainer);
          else if (o.checkpointDir) await saveTrainerCheckpoint(`${o.checkpointDir}/step-${step}`, o.trainer);
        }
      }
    });
  }

  /** Enqueues `tasks` (each `n` times), waits for them, and adapts each rollout's latest spans. */
  private async rollouts(
    server: PolicyEndpoint,
    tasks: readonly unknown[],
    n: number,
    mode: "train" | "val",
    tag: string,
  ): Promise<{ finished: FinishedRollout[]; tokens: number; seconds: number }> {
    const o = this.options;
    const store = this.getStore();
    const t0 = performance.now();
    const temperature = mode === "train" ? o.temperature : o.valTemperature;
    const resources = await store.addResources({ main_llm: server.asResource({ samplingParameters: { temperature } }) });
    // each rollout names its sampler seed, so the policy server's samples do not depend on the order
    // the runners' calls reach it in
    const requests = tasks.flatMap((input, i) =>
      Array.from({ length: n }, (_, j) => ({
        input,
        mode,
        resources_id: resources.resources_id,
        metadata: {
          data_id: `${tag}-${i}`,
          is_train: mode === "train",
          [SAMPLING_SEED_KEY]: rolloutSamplingSeed(o.seed, tag, i * n + j),
        },
      })),
    );
    const enqueued = await store.enqueueManyRollouts(requests);
    await waitAll(
      store,
      enqueued.map((r) => r.rollout_id),
      o.rolloutTimeoutSeconds,
    );
    const adapter = o.adapter ?? new LlmProxyTraceToTriplet();
    let tokens = 0;
    const finished: FinishedRollout[] = [];
    for (const [k, r] of enqueued.entries()) {
      const spans = (await store.querySpans(r.rollout_id, { attempt_id: "latest" })).items;
      const triplets = spans.length > 0 ? adapter.adapt(spans) : [];
      for (const t of triplets) tokens += (t.response.token_ids as number[] | undefined)?.length ?? 0;
      finished.push({ rollout_id: r.rollout_id, data_id: requests[k].metadata.data_id, triplets });
    }
    return { finished, tokens, seconds: (performance.now() - t0) / 1000 };
  }

  private rewardsOf(finished: FinishedRollout[]): number[] {
    return finished.map((r) => {
      for (let i = r.triplets.length - 1; i >= 0; i--) {
        const v = r.triplets[i].reward;
        if (v !== null && v !== undefined) return v;
      }
      return this.options.rewardFillna;
    });
  }

  private async validate(server: PolicyEndpoint, val: Dataset<unknown>, step: number): Promise<void> {
    const tasks = Array.from({ length: val.length }, (_, i) => val[i]);
    const { finished } = await this.rollouts(server, tasks, 1, "val", `val${step}`);
    const rewards = this.rewardsOf(finished);
    const report: ValidationReport = {
      kind: "validation",
      step,
      n: rewards.length,
      reward: mean(rewards),
      accuracy: mean(rewards.map((r) => (r >= this.options.successReward ? 1 : 0))),
    };
    if (this.options.progress)
      console.log(
        `grpo validation @ step ${step}: accuracy ${(report.accuracy * 100).toFixed(1)}% reward ${report.reward.toFixed(3)} (${report.n} tasks)`,
      );
    await this.report(report, "grpo.validation");
  }

  private async trainStep(server: PolicyEndpoint, tasks: unknown[], step: number): Promise<void> {
    const o = this.options;
    const t0 = performance.now();
    const { finished, tokens, seconds: rolloutSeconds } = await this.rollouts(server, tasks, o.nSamples, "train", `s${step}`);
    const rewards = this.rewardsOf(finished);
    const u = await grpoUpdate(o.trainer, finished, {
      maxPromptLength: o.maxPromptLength,
      maxResponseLength: o.maxResponseLength,
      traceAggregator: o.traceAggregator,
      grouping: o.grouping,
      rewardFillna: o.rewardFillna,
      normByStd: o.normByStd,
      dropTiedGroups: o.dropTiedGroups,
      loss: o.loss,
      lr: o.lrSchedule ? o.lrSchedule(step, o.steps) : o.lr,
      microBatchSize: o.microBatchSize,
      miniBatchSize: o.miniBatchSize,
      ppoEpochs: o.ppoEpochs,
      trackKl: o.trackKl,
      kernels: o.kernels,
      shuffle: this.shuffle,
    });
    if (u.changed) o.policy.update((await o.trainer.getState()).params);
    const metrics = u.metrics;
    const [trained, klRef, updates, skippedUpdates] = [u.trainedRows, u.klRef, u.updates, u.skippedUpdates];
    const report: StepReport = {
      kind: "step",
      step,
      version: o.policy.version,
      reward: mean(rewards),
      accuracy: mean(rewards.map((r) => (r >= o.successReward ? 1 : 0))),
      zero_variance_group_share: u.tiedGroupShare,
      rows: u.rows,
      trained_rows: trained,
      tokens: u.tokens,
      trained_tokens: u.trainedTokens,
      loss_tokens: u.lossTokens,
      kl: metrics?.approx_kl ?? 0,
      kl_ref: klRef,
      updates,
      skipped_updates: skippedUpdates,
      clip_frac: metrics?.clip_frac ?? 0,
      entropy: metrics?.entropy ?? 0,
      grad_norm: metrics?.grad_norm ?? 0,
      loss: metrics?.loss ?? 0,
      train_tokens_per_second: metrics?.tokens_per_second ?? 0,
      rollout_tokens_per_second: rolloutSeconds > 0 ? tokens / rolloutSeconds : 0,
      seconds: (performance.now() - t0) / 1000,
      skipped: updates === 0 || skippedUpdates === updates,
    };
    if (skippedUpdates > 0)
      log.warn(`grpo step ${step}: ${skippedUpdates} of ${updates} updates skipped (loss or gradient not finite); weights kept`);
    if (o.progress) {
      console.log(
        `grpo ${progressBar(step, o.steps)} step ${step}/${o.steps} reward ${report.reward.toFixed(3)} acc ${(report.accuracy * 100).toFixed(1)}% ` +
          `zero-var ${(report.zero_variance_group_share * 100).toFixed(0)}% kl ${report.kl.toExponential(2)}${o.trackKl || (o.loss?.klLossCoef ?? 0) !== 0 ? ` kl_ref ${report.kl_ref.toExponential(2)}` : ""} clip ${report.clip_frac.toFixed(3)} ` +
          `rows ${trained}/${u.rows} (${u.trainedTokens} tokens) gen ${report.rollout_tokens_per_second.toFixed(0)} tok/s train ${report.train_tokens_per_second.toFixed(0)} tok/s ${report.seconds.toFixed(1)} s`,
      );
    }
    await this.report(report, "grpo.step");
  }

  private async report(report: GrpoReport, name: string): Promise<void> {
    this.reports.push(report);
    this.options.onReport?.(report);
    if (!this.metricsRollout) return;
    const attributes: Attributes = {};
    for (const [k, v] of Object.entries(report))
      if (typeof v === "number" || typeof v === "boolean" || typeof v === "string") attributes[`grpo.${k}`] = v;
    await this.metricsRollout.record(name, attributes);
  }
}

async function waitAll(store: LightningStore, ids: string[], timeoutSeconds: number): Promise<void> {
  const deadline = performance.now() + timeoutSeconds * 1000;
  let pending = new Set(ids);
  while (pending.size > 0) {
    const left = (deadline - performance.now()) / 1000;
    if (left <= 0) throw new RuntimeError(`${pending.size} rollouts did not finish within ${timeoutSeconds} s`);
    const done = await store.waitForRollouts({ rollout_ids: [...pending], timeout: Math.min(left, 5) });
    for (const r of done) if (FINISHED.has(r.status)) pending.delete(r.rollout_id);
    pending = new Set(pending);
  }
}

const mean = (xs: number[]): number => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);

/** A learning-rate factor: 1 until the last `share` of the steps, then linear down to `final` at the last
 * step (a late decay keeps what the early steps gained). */
export function lateDecay(step: number, steps: number, share: number, final: number): number {
  const start = steps * (1 - share);
  if (step <= start || steps <= start) return 1;
  return 1 - (1 - final) * ((step - start) / (steps - start));
}

/** The built-in checkpoint: the whole model (+ optimizer) as our safetensors checkpoint, or for a LoRA
 * trainer the adapter in PEFT's layout with its optimizer state. */
export async function saveTrainerCheckpoint(dir: string, trainer: PolicyTrainer): Promise<void> {
  const state = await trainer.getState();
  if (state.lora) await saveLoraCheckpoint(dir, state.config, { config: state.lora, params: state.params }, state.optimizer);
  else await saveCheckpoint(dir, { config: state.config, params: state.params, optimizer: state.optimizer });
}
