/**
 * GpuPolicyTrainer: the PolicyTrainer API (src/model/train-types.ts) on WebGPU, the same math as the
 * CPU trainer (src/cpu/trainer.ts). Parameters, gradients and AdamW moments live on the GPU for the
 * trainer's lifetime; a step uploads the batch and downloads only the metric sums and the gradient norm.
 * A non-finite loss or gradient norm skips the optimizer update (weights untouched) and says so.
 *
 * With `lora`, a LoRA adapter trains on a frozen base (docs/lora.md), as in the CPU trainer: the base has no
 * gradient or optimizer buffers and may be stored in 16 bits (`weightFormat`), the backward forms only the
 * adapter's gradients, and AdamW, the gradient norm and the state cover the adapter alone.
 */
import { paramCount, parseModelConfig, type ModelConfig } from "../model/config.ts";
import {
  checkResponseTensor,
  logitTemperature,
  microBatches,
  resolveResponseMask,
  rowWidth,
  sliceRows,
  validateBatch,
} from "../model/batch.ts";
import { initParams } from "../model/init.ts";
import { initLora, loraParamCount, parseLoraConfig, type LoraConfig } from "../model/lora.ts";
import type { ModelParams } from "../model/params.ts";
import { resolveOptimizerOptions } from "../model/reference/optim.ts";
import {
  aggWeights,
  covSelection,
  needsCovSelection,
  normFromMask,
  pgAggMode,
  resolveLossOptions,
  type AggNorm,
} from "../model/ppo-loss.ts";
import { ValidationError } from "../types/errors.ts";
import type {
  LogProbOptions,
  LogProbsResult,
  OptimizerOptions,
  OptimizerState,
  PolicyStepOptions,
  PolicyTrainer,
  SftStepOptions,
  StepMetrics,
  TokenBatch,
  TrainerState,
} from "../model/train-types.ts";
import { GpuContext } from "./context.ts";
import { checkTokenRanges, GpuModel, type MicroInputs, type MicroShape } from "./model.ts";
import { INPUT_COLUMNS, METRIC_COLUMNS, packLossInputs, ppoLoss, ppoParams, seqLogRatio, type PpoParams } from "./kernels/ppo-loss.ts";
import { columnSums, sumSquares, SUMSQ_GROUPS } from "./kernels/reduce.ts";
import { adamw, adamwScalars } from "./kernels/adamw.ts";
import { GpuOutOfMemoryError, type GpuDeviceOptions } from "./device.ts";
import type { WeightFormat } from "./kernels/weights.ts";

export interface GpuTrainerOptions extends OptimizerOptions {
  config: ModelConfig;
  /** Seed of the initial parameters when `params` is absent [0]. */
  seed?: number;
  /** Initial parameters, flat (paramLayout order, e.g. from a checkpoint) or tensors by name (e.g. a loaded
   * Hugging Face model's weights). */
  params?: ModelParams;
  /** Optimizer state to resume from. */
  optimizer?: OptimizerState;
  /** A context to share (otherwise one is created, and destroyed by `destroy()`). */
  context?: GpuContext;
  device?: GpuDeviceOptions;
  /** Train a LoRA adapter on frozen `base` weights instead of the whole model; `adapter` (flat, loraLayout
   * order) resumes one, else PEFT's initialisation from `seed` [0]. `params` and `seed` above are then unused. */
  lora?: { config: LoraConfig; base: ModelParams; adapter?: Float32Array; seed?: number };
  /** How the frozen base's weight matrices are stored with `lora`: float32 [default], bf16 or f16 (half the
   * memory; kernels/weights.ts; docs/departures.md#38). Full fine-tuning keeps float32. */
  weightFormat?: WeightFormat;
  /** Keep only each layer's input in the forward and recompute the layer's activations in the backward
   * (activation checkpointing): activation memory stops growing with n_layers, for about one more forward
   * per step [false]. */
  recomputeActivations?: boolean;
}

const MASKED_MEAN_EPS = 1e-8;
const C = METRIC_COLUMNS.length;
const col = (name: (typeof METRIC_COLUMNS)[number]): number => METRIC_COLUMNS.indexOf(name);

function now(): number {
  return typeof performance !== "undefined" ? performance.now() : Date.now();
}

/** A (micro-)batch in the GPU formats: u32 ids/mask/positions, the rows that predict response tokens, the targets. */
export function microInputs(batch: TokenBatch): { shape: MicroShape; inputs: MicroInputs } {
  const { n: B, P, R } = batch;
  const T = rowWidth(batch);
  const predictRows = new Uint32Array(B * R);
  const targets = new Uint32Array(B * R);
  for (let b = 0; b < B; b++) {
    for (let c = 0; c < R; c++) {
      predictRows[b * R + c] = b * T + P + c - 1;
      targets[b * R + c] = batch.inputIds[b * T + P + c];
    }
  }
  return {
    shape: { B, T, R },
    inputs: {
      ids: new Uint32Array(batch.inputIds.buffer, batch.inputIds.byteOffset, batch.inputIds.length),
      mask: Uint32Array.from(batch.attentionMask),
      positions: new Uint32Array(batch.positionIds.buffer, batch.positionIds.byteOffset, batch.positionIds.length),
      predictRows,
      targets,
    },
  };
}

/** The step's per-token loss inputs, [B * R] each. */
interface PerToken {
  advantages: Float32Array;
  oldLogProbs: Float32Array;
  refLogProbs?: Float32Array;
  /** gspo's aggregation weight of the policy term (the step's `weight` otherwise) */
  pgWeight?: Float32Array;
  /** clip_cov / kl_cov: the tokens picked over the whole step */
  selected?: Uint8Array;
}

/** The loss kernel's per-micro-batch buffers. */
type LossBuffers = Record<"inputs" | "seqLogRatio" | "metrics", GPUBuffer>;

export class GpuPolicyTrainer implements PolicyTrainer {
  readonly backend = "webgpu" as const;
  readonly config: ModelConfig;
  private readonly model: GpuModel;
  private readonly optim: Required<OptimizerOptions>;
  private stepCount: number;
  private loss: { buffers: LossBuffers; rows: number } | null = null;
  private partials: GPUBuffer;
  /** The adapter's config in LoRA mode. */
  private readonly lora: LoraConfig | null;

  private constructor(
    readonly ctx: GpuContext,
    private readonly ownsContext: boolean,
    options: GpuTrainerOptions,
  ) {
    this.config = parseModelConfig(options.config);
    this.optim = resolveOptimizerOptions(options);
    const modelOptions = { weightFormat: options.weightFormat, recomputeActivations: options.recomputeActivations };
    if (options.lora !== undefined) {
      const lora = parseLoraConfig(options.lora.config);
      const size = loraParamCount(this.config, lora);
      const given = options.lora.adapter;
      if (given !== undefined && given.length !== size)
        throw new ValidationError(`adapter has ${given.length} elements, the config needs ${size}`, ["lora"]);
      const adapter = given ?? initLora(this.config, lora, options.lora.seed ?? 0);
      this.lora = lora;
      this.model = new GpuModel(ctx, this.config, options.lora.base, true, { ...modelOptions, lora: { config: lora, params: adapter } });
    } else {
      const size = paramCount(this.config);
      if (options.params instanceof Float32Array && options.params.length !== size)
        throw new ValidationError(`params has ${options.params.length} elements, the config needs ${size}`, ["params"]);
      this.lora = null;
      this.model = new GpuModel(ctx, this.config, options.params ?? initParams(this.config, options.seed ?? 0), true, modelOptions);
    }
    this.stepCount = 0;
    try {
      if (options.optimizer !== undefined) this.loadOptimizer(options.optimizer);
      this.partials = ctx.alloc(this.model.trained.layout.length * SUMSQ_GROUPS + 1, "grad_norm_partials");
    } catch (e) {
      this.model.destroy();
      throw e;
    }
  }

  /** The adapter's config when this trainer trains a LoRA adapter on a frozen base; null otherwise. */
  get loraConfig(): LoraConfig | null {
    return this.lora === null ? null : { ...this.lora };
  }

  /** Acquires a device (or uses `options.context`) and uploads the initial parameters. */
  static async create(options: GpuTrainerOptions): Promise<GpuPolicyTrainer> {
    parseModelConfig(options.config); // bad input fails before a device is taken
    const ctx = options.context ?? (await GpuContext.create(options.device));
    ctx.throwIfLost();
    const before = ctx.allocatedBytes;
    // WebGPU reports a failed allocation as an error event, not an exception: catch it in a scope.
    ctx.device.pushErrorScope("out-of-memory");
    let trainer: GpuPolicyTrainer | null = null;
    let failure: unknown = null;
    try {
      trainer = new GpuPolicyTrainer(ctx, options.context === undefined, options);
    } catch (e) {
      failure = e;
    }
    const oom = await ctx.device.popErrorScope();
    if (oom !== null && failure === null) {
      const bytes = ctx.allocatedBytes - before;
      failure = new GpuOutOfMemoryError(
        `the device could not allocate ${bytes} bytes for a ${paramCount(options.config)}-parameter model (weights, gradients, Adam state and workspace): ${oom.message}. Use a smaller model, LoRA, or the CPU engine`,
      );
    }
    if (failure !== null) {
      trainer?.destroy();
      if (options.context === undefined) ctx.destroy();
      throw failure;
    }
    return trainer!;
  }

  private loadOptimizer(o: OptimizerState): void {
    const t = this.model.trained;
    if (o.m.length !== t.size || o.v.length !== t.size)
      throw new ValidationError(`optimizer state has ${o.m.length} elements, the config needs ${t.size}`, ["optimizer"]);
    t.writeFlat(t.m, o.m, "optimizer");
    t.writeFlat(t.v, o.v, "optimizer");
    this.stepCount = o.step;
  }

  /** Calls run one at a time per context: they share its command encoder and this trainer's workspace. */
  private exclusive<T>(run: () => Promise<T>): Promise<T> {
    return this.ctx.exclusive(run);
  }

  /** Shapes, masks and token/position ranges, checked before any GPU work so bad input changes nothing. */
  private validate(batch: TokenBatch): void {
    validateBatch(batch);
    checkTokenRanges(this.config, batch.inputIds, batch.positionIds);
  }

  logProbs(batch: TokenBatch, options: LogProbOptions = {}): Promise<LogProbsResult> {
    return this.exclusive(() => this.runLogProbs(batch, options));
  }

  policyStep(
    batch: TokenBatch,
    advantages: Float32Array,
    oldLogProbs: Float32Array,
    options: PolicyStepOptions = {},
  ): Promise<StepMetrics> {
    return this.exclusive(() => this.runPolicyStep(batch, advantages, oldLogProbs, options));
  }

  /** Cross-entropy of the response tokens, aggregated with `lossAggMode` [token-mean]. */
  sftStep(batch: TokenBatch, options: SftStepOptions = {}): Promise<StepMetrics> {
    return this.exclusive(() => this.runSftStep(batch, options));
  }

  private async runLogProbs(batch: TokenBatch, options: LogProbOptions): Promise<LogProbsResult> {
    this.validate(batch);
    const temperature = logitTemperature(options.temperature);
    const { n, R } = batch;
    const log_probs = new Float32Array(n * R);
    const entropy = new Float32Array(n * R);
    for (const [r0, r1] of microBatches(n, options.microBatchSize)) {
      const { shape, inputs } = microInputs(sliceRows(batch, r0, r1));
      // baseOnly: the frozen base without the adapter, a LoRA run's KL reference
      const ws = this.model.forward(shape, inputs, { adapter: !(options.baseOnly && this.lora !== null), temperature });
      const rows = (r1 - r0) * R;
      log_probs.set(await this.ctx.read(ws.logprob, rows), r0 * R);
      entropy.set(await this.ctx.read(ws.entropy, rows), r0 * R);
    }
    return { log_probs, entropy };
  }

  private async runPolicyStep(
    batch: TokenBatch,
    advantages: Float32Array,
    oldLogProbs: Float32Array,
    options: PolicyStepOptions,
  ): Promise<StepMetrics> {
    this.validate(batch);
    checkResponseTensor("advantages", advantages, batch);
    checkResponseTensor("oldLogProbs", oldLogProbs, batch);
    const ref = options.refLogProbs;
    if (ref !== undefined) checkResponseTensor("refLogProbs", ref, batch);
    const o = resolveLossOptions(options);
    const temperature = logitTemperature(options.temperature);
    if (o.klLossCoef !== 0 && ref === undefined) throw new ValidationError("klLossCoef needs reference log-probs", ["refLogProbs"]);
    const params = ppoParams(o, ref !== undefined);
    const perToken: PerToken = { advantages, oldLogProbs, refLogProbs: ref };
    const { n, R } = batch;
    if (pgAggMode(o) !== o.lossAggMode) {
      const mask = resolveResponseMask(batch);
      perToken.pgWeight = Float32Array.from(aggWeights(mask, n, R, pgAggMode(o), normFromMask(mask, n, R)));
    }
    if (needsCovSelection(o.lossMode)) {
      // The covariance selection spans the whole step: one forward over it first (one more forward per
      // step; docs/training.md#the-ppo-loss), seeded by the step count like the CPU trainer's.
      const { log_probs } = await this.runLogProbs(batch, { microBatchSize: options.microBatchSize, temperature });
      const responseMask = resolveResponseMask(batch);
      perToken.selected = covSelection({ rows: n, cols: R, logProbs: log_probs, oldLogProbs, advantages, responseMask }, o, this.stepCount);
    }
    return this.step(batch, { ...options, temperature }, o.lossAggMode, params, perToken, (s) => ({
      loss: s.pg - o.entropyCoeff * s.entropy + o.klLossCoef * s.kl,
      pg_loss: s.pg,
    }));
  }

  private async runSftStep(batch: TokenBatch, options: SftStepOptions): Promise<StepMetrics> {
    this.validate(batch);
    const params: PpoParams = { clipLow: 0, clipHigh: 0, clipC: 0, entropyCoeff: 0, klCoef: 0, klKind: "k1", hasRef: false, sft: true };
    const zeros = new Float32Array(batch.n * batch.R);
    return this.step(batch, options, options.lossAggMode ?? "token-mean", params, { advantages: zeros, oldLogProbs: zeros }, (s) => ({
      loss: s.pg,
      pg_loss: s.pg,
    }));
  }

  /** Buffers for `rows` tokens (seqLogRatio gets one slot per token, more than the rows it needs). */
  private lossBuffers(rows: number): LossBuffers {
    if (this.loss === null || this.loss.rows < rows) {
      this.ctx.flush();
      if (this.loss !== null) for (const b of Object.values(this.loss.buffers)) b.destroy();
      const a = (k: number): GPUBuffer => this.ctx.alloc(k);
      this.loss = {
        rows,
        buffers: { inputs: a(rows * INPUT_COLUMNS.length), seqLogRatio: a(rows), metrics: a(rows * C) },
      };
    }
    return this.loss.buffers;
  }

  /** Forward, loss and backward per micro-batch; then grad norm, and if everything is finite, clip + AdamW. */
  private async step(
    batch: TokenBatch,
    options: LogProbOptions,
    mode: PolicyStepOptions["lossAggMode"] & string,
    lossParams: PpoParams,
    perToken: PerToken,
    objective: (sums: { pg: number; entropy: number; kl: number }) => { loss: number; pg_loss: number },
  ): Promise<StepMetrics> {
    const started = now();
    const { n, R } = batch;
    const mask = resolveResponseMask(batch);
    const norm: AggNorm = normFromMask(mask, n, R);
    const weight = Float32Array.from(aggWeights(mask, n, R, mode, norm));
    const ctx = this.ctx;
    const model = this.model;
    const micro = microBatches(n, options.microBatchSize);
    const sums = ctx.alloc(micro.length * C + 1, "step_sums");
    let out: Float32Array;
    try {
      out = await this.accumulate(batch, micro, mask, weight, lossParams, perToken, sums, options.temperature ?? 1);
    } finally {
      ctx.flushBeforeRelease(); // encoded work may still reference `sums`
      sums.destroy();
    }
    const total = (name: (typeof METRIC_COLUMNS)[number]): number => {
      let s = 0;
      for (let i = 0; i < micro.length; i++) s += out[i * C + col(name)];
      return s;
    };
    const meanScale = 1 / (norm.tokens + MASKED_MEAN_EPS);
    const { loss, pg_loss } = objective({ pg: total("pg"), entropy: total("entropy"), kl: total("kl") });
    const gradNorm = Math.sqrt(out[micro.length * C]);
    const skipped = !Number.isFinite(loss) || !Number.isFinite(gradNorm);
    if (!skipped) {
      const maxNorm = this.optim.maxGradNorm;
      const coef = maxNorm > 0 && maxNorm !== Infinity ? maxNorm / (gradNorm + 1e-6) : 1;
      this.stepCount += 1;
      const scalars = adamwScalars({ ...this.optim, lr: options.lr ?? this.optim.lr }, this.stepCount, Math.min(coef, 1));
      const t = model.trained;
      for (const s of t.layout) adamw(ctx, t.params[s.name], t.grads[s.name], t.m[s.name], t.v[s.name], s.size, scalars);
      // Wait for the update so tokens_per_second covers the whole step.
      await ctx.drain();
    }
    const seconds = (now() - started) / 1000;
    return {
      loss,
      pg_loss,
      clip_frac: total("clipped") * meanScale,
      clip_frac_lower: total("clipped_lower") * meanScale,
      approx_kl: total("neg_log_ratio") * meanScale,
      entropy: total("entropy"),
      grad_norm: gradNorm,
      tokens_per_second: seconds > 0 ? norm.tokens / seconds : 0,
      tokens: norm.tokens,
      skipped,
      step: this.stepCount,
    };
  }

  /** Zeroes the gradients, runs forward, loss and backward over the micro-batches, and reads back the
   * per-micro-batch metric sums followed by the squared gradient norm. */
  private async accumulate(
    batch: TokenBatch,
    micro: Array<[number, number]>,
    mask: Float32Array,
    weight: Float32Array,
    lossParams: PpoParams,
    perToken: PerToken,
    sums: GPUBuffer,
    temperature: number,
  ): Promise<Float32Array> {
    const { ctx, model } = this;
    const R = batch.R;
    model.zeroGrads();
    micro.forEach(([r0, r1], index) => {
      const { shape, inputs } = microInputs(sliceRows(batch, r0, r1));
      const ws = model.forward(shape, inputs, { temperature });
      const rows = (r1 - r0) * R;
      const lb = this.lossBuffers(rows);
      const cut = <T extends Float32Array | Uint8Array>(a: T | undefined): T | undefined => a?.subarray(r0 * R, r1 * R) as T | undefined;
      ctx.write(
        lb.inputs,
        packLossInputs(rows, {
          oldLogprob: cut(perToken.oldLogProbs),
          advantage: cut(perToken.advantages),
          refLogprob: cut(perToken.refLogProbs),
          weight: cut(weight),
          pgWeight: cut(perToken.pgWeight),
          mask: cut(mask),
          selected: cut(perToken.selected),
        }),
      );
      const lossShape = { rows: r1 - r0, cols: R };
      if (lossParams.mode === "gspo")
        seqLogRatio(ctx, { logprob: ws.logprob, inputs: lb.inputs, seqLogRatio: lb.seqLogRatio }, lossShape.rows, R);
      ppoLoss(
        ctx,
        {
          logprob: ws.logprob,
          entropy: ws.entropy,
          inputs: lb.inputs,
          seqLogRatio: lb.seqLogRatio,
          dlogprob: ws.dlogprob,
          dentropy: ws.dentropy,
          metrics: lb.metrics,
        },
        lossShape,
        lossParams,
      );
      columnSums(ctx, lb.metrics, sums, rows, C, index * C);
      model.backward(shape, ws);
    });
    const t = model.trained;
    t.layout.forEach((s, i) => sumSquares(ctx, t.grads[s.name], s.size, this.partials, i));
    columnSums(ctx, this.partials, sums, t.layout.length * SUMSQ_GROUPS, 1, micro.length * C);
    return ctx.read(sums);
  }

  /** The last step's accumulated gradient before clipping (flat: paramLayout order, or the adapter's
   * loraLayout order in LoRA mode); for tests and diagnostics. */
  lastGradients(): Promise<Float32Array> {
    const t = this.model.trained;
    return this.exclusive(() => t.readFlat(t.grads));
  }

  /** The trained parameters (the adapter's alone in LoRA mode, `lora` then naming its config) and AdamW's state. */
  getState(): Promise<TrainerState> {
    const t = this.model.trained;
    return this.exclusive(async () => ({
      config: { ...this.config },
      params: await t.readFlat(t.params),
      optimizer: { step: this.stepCount, m: await t.readFlat(t.m), v: await t.readFlat(t.v) },
      ...(this.lora !== null ? { lora: { ...this.lora } } : {}),
    }));
  }

  setState(state: TrainerState): Promise<void> {
    return this.exclusive(async () => this.replaceState(state));
  }

  private replaceState(state: TrainerState): void {
    if (JSON.stringify(parseModelConfig(state.config)) !== JSON.stringify(this.config))
      throw new ValidationError("state was saved for a different model config", ["config"]);
    if (JSON.stringify(state.lora ?? null) !== JSON.stringify(this.lora))
      throw new ValidationError("state was saved for a different LoRA config (or with/without one)", ["lora"]);
    const t = this.model.trained;
    if (state.params.length !== t.size)
      throw new ValidationError(`params has ${state.params.length} elements, the config needs ${t.size}`, ["params"]);
    this.loadOptimizer(state.optimizer);
    t.writeFlat(t.params, state.params, "params");
    this.ctx.flush();
  }

  /** Frees the GPU buffers (and the device when this trainer created it). */
  destroy(): void {
    this.model.destroy();
    this.partials.destroy();
    if (this.loss !== null) for (const b of Object.values(this.loss.buffers)) b.destroy();
    if (this.ownsContext) this.ctx.destroy();
  }
}
