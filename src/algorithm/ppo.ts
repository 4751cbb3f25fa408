/**
 * The PPO family (docs/training.md#the-ppo-step): verl's agent-mode PPO trainer on one machine. GRPO is
 * this algorithm with `advEstimator: "grpo"` and no critic (grpo.ts).
 *
 * Each step: publish the policy server as the `main_llm` resource (a ProxyLLM, so every runner's calls
 * carry the rollout/attempt routing prefix and land in the store with their token ids), enqueue each
 * task of the batch `nSamples` times with `metadata.data_id` and a `sampling_seed` from `seed` (so a seed
 * gives the same samples whatever order the runners' calls arrive in), wait for the rollouts (and for
 * ReMax one greedy rollout per task, its baseline), turn each one's spans into triplets with the adapter,
 * then `ppoUpdate` (grpo-step.ts): the padded batch, the KL penalty in the reward when it is on, the
 * critic's values, the estimator's advantages in the Wasm core, the critic's update, and after
 * `criticWarmup` steps the actor's `policyStep`s on the trainer (WebGPU or CPU); the new weights are then
 * served as the next policy version. Validation (temperature 0, one rollout per task) runs before the
 * first step, every `valEvery` steps and after the last; checkpoints are written every `checkpointEvery` steps.
 *
 * Rows whose advantages are all zero (GRPO's tied groups) carry no policy gradient; they are left out of
 * the actor's update (`dropTiedGroups`), which saves their forward and backward passes.
 *
 * With `ppoEpochs` > 1 or a `miniBatchSize` below the kept rows, the old log-probs are computed once and
 * the rows are walked `ppoEpochs` times in shuffled mini-batches, one optimizer update each. Inside an
 * update, `microBatchSize` rows go through each forward/backward and the gradients accumulate. A LoRA
 * trainer gives the KL reference for free: the base with the adapter switched off. An update whose loss
 * or gradient is not finite is skipped by the trainer (weights untouched), counted in `skipped_updates` and logged.
 *
 * Metrics per step go to the console (a progress line) and to the store: each step is a `<name>.step`
 * span (`grpo.step` for GRPO, `ppo.step` otherwise), each validation a `<name>.validation` span, under one
 * `<name>-metrics` bookkeeping rollout; the step's verl-named metrics (`critic/score/mean`, ...) are attributes too.
 */
import { checkRowOptions, type FinishedRollout } from "../adapter/index.ts";
import { LlmProxyTraceToTriplet } from "../adapter/proxy-triplet.ts";
import { saveCheckpoint } from "../model/checkpoint.ts";
import { decodeIds } from "../model/detokenize.ts";
import { saveLoraCheckpoint } from "../model/hf/lora-checkpoint.ts";
import { Rng } from "../model/init.ts";
import type { PolicyTrainer } from "../model/train-types.ts";
import { saveValueCheckpoint } from "../model/value-checkpoint.ts";
import type { ValueTrainer } from "../model/value-types.ts";
import type { PolicyServer } from "../proxy/policy-server.ts";
import { rolloutSamplingSeed, SAMPLING_SEED_KEY } from "../proxy/sampling-seed.ts";
import type { LightningStore } from "../store/base.ts";
import { platform } from "../platform/index.ts";
import { getLogger } from "../platform/log.ts";
import type { Attributes } from "../types/span.ts";
import { RuntimeError } from "../runner/errors.ts";
import { ValidationError } from "../types/errors.ts";
import { KL_ALIASES } from "../wasm/types.ts";
import { checkEstimator } from "./advantages.ts";
import { Algorithm, batchIterOverDataset, withLlmProxy, type Dataset } from "./base.ts";
import { BookkeepingRollout } from "./bookkeeping.ts";
import { checkCritic, ppoUpdate, type PpoUpdate } from "./grpo-step.ts";
import { klController, type KlController } from "./kl-controller.ts";
import type { PpoOptions } from "./ppo-options.ts";
import type { PpoReport, StepReport, ValidationReport } from "./ppo-reports.ts";

export type { PpoReport, StepReport, ValidationReport } from "./ppo-reports.ts";

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
  | "saveCheckpoint"
  | "klCtrl"
  | "critic"
  | "rolloutDataDir"
  | "signal";

const FINISHED = new Set(["succeeded", "failed", "cancelled"]);

function progressBar(done: number, total: number, width = 20): string {
  const filled = total > 0 ? Math.round((done / total) * width) : width;
  return `[${"#".repeat(filled)}${".".repeat(width - filled)}]`;
}

export class PPO extends Algorithm {
  readonly options: Required<Omit<PpoOptions, OptionalKeys>> & Pick<PpoOptions, OptionalKeys>;
  /** Every report, in order. */
  readonly reports: PpoReport[] = [];
  /** β of the KL penalty in the reward (verl's `kl_ctrl_in_reward`), updated after each step. */
  readonly klCtrl: KlController;
  private metricsRollout: BookkeepingRollout | null = null;
  private shuffle = new Rng(0);
  private readonly log: ReturnType<typeof getLogger>;

  /** `name` prefixes the spans, the bookkeeping rollout's kind and the progress lines. */
  constructor(
    o: PpoOptions,
    protected readonly name: string = "ppo",
  ) {
    super();
    this.log = getLogger(`agentlightning.algorithm.${name}`);
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
      advEstimator: "grpo",
      gamma: 1,
      lam: 1,
      useKlInReward: false,
      klPenalty: "kl",
      criticWarmup: 0,
      dropRemainder: false,
      ...o,
      traceAggregator: { level: "transition", ...o.traceAggregator },
    };
    const opts = this.options;
    checkRowOptions(opts.traceAggregator.level ?? "transition", opts.grouping, {
      level: ["traceAggregator", "level"],
      grouping: ["grouping"],
    });
    for (const k of ["steps", "batchSize", "nSamples", "ppoEpochs"] as const) {
      const v = opts[k];
      if (!(Number.isInteger(v) && v >= 1)) throw new ValidationError(`${k} must be a positive integer, got ${v}`, [k]);
    }
    const mb = opts.miniBatchSize;
    if (mb !== undefined && !(Number.isInteger(mb) && mb >= 1))
      throw new ValidationError(`miniBatchSize must be a positive integer, got ${mb}`, ["miniBatchSize"]);
    const start = opts.startStep;
    if (!(Number.isInteger(start) && start >= 0 && start <= opts.steps))
      throw new ValidationError(`startStep must be an integer in [0, steps], got ${start}`, ["startStep"]);
    const wantsRef = (opts.loss?.klLossCoef ?? 0) !== 0 || opts.trackKl;
    if (wantsRef && !opts.trainer.loraConfig)
      throw new ValidationError(
        "a KL to the reference model needs a LoRA trainer (its base is the reference); full fine-tuning keeps no second copy",
        ["loss", "klLossCoef"],
      );
    checkPpoOptions(opts);
    this.klCtrl = klController(opts.klCtrl);
  }

  get validations(): ValidationReport[] {
    return this.reports.filter((r): r is ValidationReport => r.kind === "validation");
  }
  get steps(): StepReport[] {
    return this.reports.filter((r): r is StepReport => r.kind === "step");
  }

  private get title(): string {
    return this.name.toUpperCase();
  }

  async run(trainDataset?: Dataset<unknown> | null, valDataset?: Dataset<unknown> | null): Promise<void> {
    if (!trainDataset || trainDataset.length === 0)
      throw new ValidationError(`${this.title} needs a non-empty training dataset`, ["train_dataset"]);
    await withLlmProxy(
      this,
      async (proxy) => {
        if (proxy === null || typeof (proxy as unknown as PolicyEndpoint).asResource !== "function")
          throw new RuntimeError(`${this.title} needs a PolicyServer as its LLM proxy (Trainer option llmProxy)`);
        await this.loop(proxy as unknown as PolicyEndpoint, trainDataset, valDataset ?? null);
      },
      { required: true },
    );
  }

  private async loop(server: PolicyEndpoint, train: Dataset<unknown>, val: Dataset<unknown> | null): Promise<void> {
    const o = this.options;
    const store = this.getStore();
    const metrics = await BookkeepingRollout.start(store, { algorithm: this.name, steps: o.steps }, `${this.name}-metrics`);
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
        const stopped = o.signal?.aborted === true;
        const last = step === o.steps || stopped;
        if (val && (last || (o.valEvery > 0 && step % o.valEvery === 0))) await this.validate(server, val, step);
        if (last || step % o.checkpointEvery === 0) {
          const critic = o.critic?.trainer ?? null;
          if (o.saveCheckpoint) await o.saveCheckpoint(step, o.trainer, critic);
          else if (o.checkpointDir) await saveTrainerCheckpoint(`${o.checkpointDir}/step-${step}`, o.trainer, critic);
        }
        if (stopped) break;
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
    temperature = mode === "train" ? this.options.temperature : this.options.valTemperature,
  ): Promise<{ finished: FinishedRollout[]; tokens: number; seconds: number }> {
    const o = this.options;
    const store = this.getStore();
    const t0 = performance.now();
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
        `${this.name} validation @ step ${step}: accuracy ${(report.accuracy * 100).toFixed(1)}% reward ${report.reward.toFixed(3)} (${report.n} tasks)`,
      );
    await this.report(report, `${this.name}.validation`);
  }

  /** ReMax's baselines: the reward of one greedy (temperature 0) rollout of each task, by the data id its sampled rollouts carry. */
  private async greedyBaselines(server: PolicyEndpoint, tasks: unknown[], step: number): Promise<Map<string, number>> {
    const { finished } = await this.rollouts(server, tasks, 1, "train", `s${step}-greedy`, 0);
    const rewards = this.rewardsOf(finished);
    return new Map(rewards.map((r, i) => [`s${step}-${i}`, r]));
  }

  private async trainStep(server: PolicyEndpoint, tasks: unknown[], step: number): Promise<void> {
    const o = this.options;
    const t0 = performance.now();
    const { finished, tokens, seconds: rolloutSeconds } = await this.rollouts(server, tasks, o.nSamples, "train", `s${step}`);
    const rewardBaselines = o.advEstimator === "remax" ? await this.greedyBaselines(server, tasks, step) : undefined;
    const rewards = this.rewardsOf(finished);
    const u = await ppoUpdate(o.trainer, finished, {
      maxPromptLength: o.maxPromptLength,
      maxResponseLength: o.maxResponseLength,
      traceAggregator: o.traceAggregator,
      grouping: o.grouping,
      rewardFillna: o.rewardFillna,
      normByStd: o.normByStd,
      dropTiedGroups: o.dropTiedGroups,
      loss: o.loss,
      temperature: o.temperature,
      lr: o.lrSchedule ? o.lrSchedule(step, o.steps) : o.lr,
      microBatchSize: o.microBatchSize,
      miniBatchSize: o.miniBatchSize,
      ppoEpochs: o.ppoEpochs,
      trackKl: o.trackKl,
      kernels: o.kernels,
      shuffle: this.shuffle,
      advEstimator: o.advEstimator,
      gamma: o.gamma,
      lam: o.lam,
      useKlInReward: o.useKlInReward,
      klPenalty: o.klPenalty,
      klCtrl: this.klCtrl,
      critic: o.critic,
      updateActor: step > o.criticWarmup,
      rewardBaselines,
      dropRemainder: o.dropRemainder,
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
      metrics: u.verlMetrics,
    };
    if (skippedUpdates > 0)
      this.log.warn(
        `${this.name} step ${step}: ${skippedUpdates} of ${updates} updates skipped (loss or gradient not finite); weights kept`,
      );
    if (skippedUpdates === 0 && updateForwardDiffered(o.trainer.backend, updates, report.kl))
      this.log.warn(
        `${this.name} step ${step}: the update's forward pass gave other log-probs than the old log-prob pass on the same weights ` +
          `(kl ${report.kl.toExponential(2)}, not 0): the CPU engine computed the same thing twice and got two answers, so this ` +
          "step's update is not the one the seed gives; please report it with the run's metrics.jsonl",
      );
    if (o.progress) {
      const m = u.verlMetrics;
      const extra =
        (o.useKlInReward
          ? ` kl_reward ${m["actor/reward_kl_penalty"].toExponential(2)} β ${m["actor/reward_kl_penalty_coeff"].toExponential(2)}`
          : "") +
        (u.criticMetrics ? ` vf_loss ${u.criticMetrics.vf_loss.toExponential(2)}` : "") +
        (step <= o.criticWarmup ? " (critic warm-up)" : "");
      console.log(
        `${this.name} ${progressBar(step, o.steps)} step ${step}/${o.steps} reward ${report.reward.toFixed(3)} acc ${(report.accuracy * 100).toFixed(1)}% ` +
          `zero-var ${(report.zero_variance_group_share * 100).toFixed(0)}% kl ${report.kl.toExponential(2)}${o.trackKl || (o.loss?.klLossCoef ?? 0) !== 0 ? ` kl_ref ${report.kl_ref.toExponential(2)}` : ""} clip ${report.clip_frac.toFixed(3)}${extra} ` +
          `rows ${trained}/${u.rows} (${u.trainedTokens} tokens) gen ${report.rollout_tokens_per_second.toFixed(0)} tok/s train ${report.train_tokens_per_second.toFixed(0)} tok/s ${report.seconds.toFixed(1)} s`,
      );
    }
    if (o.rolloutDataDir) await dumpGenerations(o.rolloutDataDir, step, u, (ids) => decodeIds(o.policy.tokenizer, ids));
    await this.report(report, `${this.name}.step`);
  }

  private async report(report: PpoReport, name: string): Promise<void> {
    this.reports.push(report);
    this.options.onReport?.(report);
    if (!this.metricsRollout) return;
    const attributes: Attributes = {};
    for (const [k, v] of Object.entries(report))
      if (typeof v === "number" || typeof v === "boolean" || typeof v === "string") attributes[`${this.name}.${k}`] = v;
    // verl's names as they are (`critic/score/mean`, ...)
    if (report.kind === "step") Object.assign(attributes, report.metrics);
    await this.metricsRollout.record(name, attributes);
  }
}

/** The PPO family's own option checks (GRPO's are the constructor's). */
function checkPpoOptions(o: PPO["options"]): void {
  checkEstimator(o.advEstimator);
  checkCritic(o.advEstimator, o.critic);
  for (const k of ["gamma", "lam"] as const)
    if (!(Number.isFinite(o[k]) && o[k] >= 0 && o[k] <= 1)) throw new ValidationError(`${k} must be a number in [0, 1], got ${o[k]}`, [k]);
  if (!(Number.isInteger(o.criticWarmup) && o.criticWarmup >= 0))
    throw new ValidationError(`criticWarmup must be a non-negative integer, got ${o.criticWarmup}`, ["criticWarmup"]);
  if (!(o.klPenalty in KL_ALIASES))
    throw new ValidationError(`klPenalty must be one of ${Object.keys(KL_ALIASES).join(", ")}, got ${JSON.stringify(o.klPenalty)}`, [
      "klPenalty",
    ]);
  if (o.useKlInReward && !o.trainer.loraConfig)
    throw new ValidationError(
      "useKlInReward needs a LoRA trainer (its base is the reference model); full fine-tuning keeps no second copy",
      ["useKlInReward"],
    );
  const c = o.critic;
  if (c) {
    for (const k of ["ppoEpochs", "miniBatchSize", "microBatchSize"] as const) {
      const v = c[k];
      if (v !== undefined && !(Number.isInteger(v) && v >= 1))
        throw new ValidationError(`critic.${k} must be a positive integer, got ${v}`, ["critic", k]);
    }
    if (c.cliprangeValue !== undefined && !(c.cliprangeValue > 0))
      throw new ValidationError(`critic.cliprangeValue must be > 0, got ${c.cliprangeValue}`, ["critic", "cliprangeValue"]);
  }
}

/**
 * verl's `_dump_generations` for `trainer.rollout_data_dir`: `<dir>/<step>.jsonl`, one line per row of the
 * step's batch: `input` and `output` (the prompt's and response's text, special tokens skipped), `score`
 * (the row's reward), `step`, and ours: the token ids, the data and rollout ids, `reward` (the score minus
 * the KL penalty), the response tokens' `advantages` (0 where the loss mask is) and whether the row trained.
 */
export async function dumpGenerations(dir: string, step: number, u: PpoUpdate, decode: (ids: number[]) => string): Promise<string> {
  const t = u.batch.tensors;
  const { P, R } = t;
  const W = P + R;
  const lines: string[] = [];
  for (let i = 0; i < t.n; i++) {
    const promptIds: number[] = [];
    const responseIds: number[] = [];
    const advantages: number[] = [];
    let score = 0,
      reward = 0;
    for (let j = 0; j < P; j++) if (t.attentionMask[i * W + j]) promptIds.push(t.inputIds[i * W + j]);
    for (let j = 0; j < R; j++) {
      const k = i * R + j;
      score += t.tokenLevelScores[k];
      reward += u.tokenRewards[k];
      if (!t.attentionMask[i * W + P + j]) continue;
      responseIds.push(t.inputIds[i * W + P + j]);
      advantages.push(t.responseMask[k] ? u.advantages[k] : 0);
    }
    lines.push(
      JSON.stringify({
        input: decode(promptIds),
        output: decode(responseIds),
        score,
        step,
        data_id: u.batch.dataIds[i],
        rollout_id: u.batch.rolloutIds[i],
        prompt_ids: promptIds,
        response_ids: responseIds,
        reward,
        advantages,
        trained: u.trained[i] === 1,
      }),
    );
  }
  const files = platform.files();
  await files.mkdir(dir);
  const path = `${dir}/${step}.jsonl`;
  await files.writeFile(path, new TextEncoder().encode(lines.length ? `${lines.join("\n")}\n` : ""));
  return path;
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

/** The built-in checkpoint: the whole model (+ optimizer) as our safetensors checkpoint, or for a LoRA
 * trainer the adapter in PEFT's layout with its optimizer state; a critic's state in `<dir>/critic`. */
export async function saveTrainerCheckpoint(dir: string, trainer: PolicyTrainer, critic: ValueTrainer | null = null): Promise<void> {
  const state = await trainer.getState();
  if (state.lora) await saveLoraCheckpoint(dir, state.config, { config: state.lora, params: state.params }, state.optimizer);
  else await saveCheckpoint(dir, { config: state.config, params: state.params, optimizer: state.optimizer });
  if (critic) await saveValueCheckpoint(criticCheckpointDir(dir), await critic.getState());
}

/** Where a checkpoint folder keeps the critic's state. */
export const criticCheckpointDir = (dir: string): string => `${dir.endsWith("/") ? dir.slice(0, -1) : dir}/critic`;

/**
 * Whether a step's one update saw different log-probs than its old log-prob pass. The old log-probs are
 * computed on the weights the update starts from, and one update runs the same rows in the same
 * micro-batches, so its forward must give them again: the PPO KL (mean old − new) is exactly 0 on the CPU
 * trainer, whose passes repeat to the bit. A WebGPU trainer's reductions may round differently between passes.
 */
export function updateForwardDiffered(backend: "cpu" | "webgpu", updates: number, kl: number): boolean {
  return backend === "cpu" && updates === 1 && kl !== 0;
}
