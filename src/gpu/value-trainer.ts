/**
 * The critic on WebGPU (docs/training.md#the-critic), the counterpart of the CPU critic
 * (src/cpu/value-trainer.ts), same math. The decoder runs on the GPU as the policy's does (`GpuModel` with
 * no LM head: the passes stop at, and the backward starts from, the final hidden rows that predict response
 * tokens, which are the rows the critic reads); the value head (d + 1 numbers), verl's clipped value loss
 * and the head's AdamW run on the host (`valueHeadForward`/`Backward`, `valueLoss`, `adamwStep`): per
 * micro-batch those rows come down and their gradient goes up, [rows · R, d] each way. The decoder's AdamW,
 * the gradient norm and its clipping are the GPU policy trainer's kernels; the norm covers the head too.
 */
import { checkResponseTensor, microBatches, resolveResponseMask, sliceRows, validateBatch } from "../model/batch.ts";
import { parseModelConfig, type ModelConfig } from "../model/config.ts";
import type { ModelParams } from "../model/params.ts";
import { normFromMask } from "../model/ppo-loss.ts";
import { adamwStep, clipGradNorm, newOptimizerState, resolveOptimizerOptions } from "../model/reference/optim.ts";
import { valueHeadBackward, valueHeadForward } from "../model/reference/value-head.ts";
import type { OptimizerOptions, OptimizerState, StepOptions, TokenBatch } from "../model/train-types.ts";
import { resolveCliprangeValue, valueLoss } from "../model/value-loss.ts";
import { decoderConfig, initValueParams, splitValueParams, valueParamCount, valueParamsFromPolicy } from "../model/value-params.ts";
import type { ValueStepMetrics, ValueStepOptions, ValueTrainer, ValueTrainerState } from "../model/value-types.ts";
import { ValidationError } from "../types/errors.ts";
import { GpuContext } from "./context.ts";
import { GpuOutOfMemoryError, type GpuDeviceOptions } from "./device.ts";
import { adamw, adamwScalars } from "./kernels/adamw.ts";
import { columnSums, sumSquares, SUMSQ_GROUPS } from "./kernels/reduce.ts";
import { checkTokenRanges, GpuModel } from "./model.ts";
import { microInputs } from "./trainer.ts";

export interface GpuValueTrainerOptions extends OptimizerOptions {
  /** The critic's architecture: the policy's config, or a smaller one (same vocabulary). */
  config: ModelConfig;
  /** The policy's weights to start from (flat in `paramLayout(config)` order, or tensors by name): the decoder
   * copies them, the LM head is dropped, the value head is fresh. */
  policyParams?: ModelParams;
  /** A critic's own parameters (`valueLayout(config)` order) to resume from. */
  params?: Float32Array;
  /** Seed of the fresh value head, and of the whole model when neither `params` nor `policyParams` is given [0]. */
  seed?: number;
  optimizer?: OptimizerState;
  /** A context to share (otherwise one is created, and destroyed by `destroy()`). */
  context?: GpuContext;
  device?: GpuDeviceOptions;
  /** Activation checkpointing, as the GPU policy trainer's option [false]. */
  recomputeActivations?: boolean;
}

export class GpuValueTrainer implements ValueTrainer {
  readonly backend = "webgpu" as const;
  readonly config: ModelConfig;
  private readonly model: GpuModel;
  private readonly optim: Required<OptimizerOptions>;
  /** The value head on the host: weight [d] then bias, and its AdamW moments (whose step is the critic's). */
  private head: Float32Array;
  private headOptimizer: OptimizerState;
  private readonly partials: GPUBuffer;

  private constructor(
    readonly ctx: GpuContext,
    private readonly ownsContext: boolean,
    options: GpuValueTrainerOptions,
  ) {
    this.config = parseModelConfig(options.config);
    this.optim = resolveOptimizerOptions(options);
    const size = valueParamCount(this.config);
    if (options.params !== undefined && options.policyParams !== undefined)
      throw new ValidationError("give params (a critic's) or policyParams (a policy's), not both", ["params"]);
    if (options.params !== undefined && options.params.length !== size)
      throw new ValidationError(`params has ${options.params.length} elements, the critic's config needs ${size}`, ["params"]);
    const seed = options.seed ?? 0;
    const flat =
      options.params ??
      (options.policyParams !== undefined
        ? valueParamsFromPolicy(this.config, options.policyParams, seed)
        : initValueParams(this.config, seed));
    const { decoder } = splitValueParams(this.config, flat);
    this.head = flat.slice(decoder.length);
    this.headOptimizer = newOptimizerState(this.head.length);
    this.model = new GpuModel(ctx, decoderConfig(this.config), decoder, true, {
      head: "none",
      recomputeActivations: options.recomputeActivations,
    });
    try {
      if (options.optimizer !== undefined) this.loadOptimizer(options.optimizer);
      this.partials = ctx.alloc(this.model.trained.layout.length * SUMSQ_GROUPS + 1, "grad_norm_partials");
    } catch (e) {
      this.model.destroy();
      throw e;
    }
  }

  /** Acquires a device (or uses `options.context`) and uploads the initial parameters. */
  static async create(options: GpuValueTrainerOptions): Promise<GpuValueTrainer> {
    parseModelConfig(options.config); // bad input fails before a device is taken
    const ctx = options.context ?? (await GpuContext.create(options.device));
    ctx.throwIfLost();
    ctx.device.pushErrorScope("out-of-memory");
    let trainer: GpuValueTrainer | null = null;
    let failure: unknown = null;
    try {
      trainer = new GpuValueTrainer(ctx, options.context === undefined, options);
    } catch (e) {
      failure = e;
    }
    const oom = await ctx.device.popErrorScope();
    if (oom !== null && failure === null)
      failure = new GpuOutOfMemoryError(
        `the device could not allocate the critic (weights, gradients, Adam state and workspace): ${oom.message}`,
      );
    if (failure !== null) {
      trainer?.destroy();
      if (options.context === undefined) ctx.destroy();
      throw failure;
    }
    return trainer!;
  }

  values(batch: TokenBatch, options: StepOptions = {}): Promise<Float32Array> {
    return this.ctx.exclusive(async () => {
      this.validate(batch);
      const { n, R } = batch;
      const mask = resolveResponseMask(batch);
      const out = new Float32Array(n * R);
      for (const [r0, r1] of microBatches(n, options.microBatchSize)) {
        const hSel = await this.selectedHidden(sliceRows(batch, r0, r1));
        out.set(this.headForward(hSel, (r1 - r0) * R), r0 * R);
      }
      for (let k = 0; k < out.length; k++) if (mask[k] === 0) out[k] = 0;
      return out;
    });
  }

  valueStep(batch: TokenBatch, returns: Float32Array, oldValues: Float32Array, options: ValueStepOptions = {}): Promise<ValueStepMetrics> {
    return this.ctx.exclusive(() => this.runValueStep(batch, returns, oldValues, options));
  }

  getState(): Promise<ValueTrainerState> {
    const t = this.model.trained;
    return this.ctx.exclusive(async () => {
      const join = (decoder: Float32Array, head: Float32Array): Float32Array => {
        const flat = new Float32Array(decoder.length + head.length);
        flat.set(decoder);
        flat.set(head, decoder.length);
        return flat;
      };
      return {
        config: { ...this.config },
        params: join(await t.readFlat(t.params), this.head),
        optimizer: {
          step: this.headOptimizer.step,
          m: join(await t.readFlat(t.m), this.headOptimizer.m),
          v: join(await t.readFlat(t.v), this.headOptimizer.v),
        },
      };
    });
  }

  setState(state: ValueTrainerState): Promise<void> {
    return this.ctx.exclusive(async () => {
      if (JSON.stringify(parseModelConfig(state.config)) !== JSON.stringify(this.config))
        throw new ValidationError("state was saved for a different model config", ["config"]);
      const size = valueParamCount(this.config);
      if (state.params.length !== size)
        throw new ValidationError(`params has ${state.params.length} elements, the critic's config needs ${size}`, ["params"]);
      this.loadOptimizer(state.optimizer);
      const t = this.model.trained;
      t.writeFlat(t.params, state.params.subarray(0, t.size), "params");
      this.head = state.params.slice(t.size);
      this.ctx.flush();
    });
  }

  /** Frees the GPU buffers (and the device when this trainer created it). */
  destroy(): void {
    this.model.destroy();
    this.partials?.destroy();
    if (this.ownsContext) this.ctx.destroy();
  }

  private loadOptimizer(o: OptimizerState): void {
    const t = this.model.trained;
    const size = t.size + this.head.length;
    if (o.m.length !== size || o.v.length !== size)
      throw new ValidationError(`optimizer state has ${o.m.length} elements, the critic's config needs ${size}`, ["optimizer"]);
    t.writeFlat(t.m, o.m.subarray(0, t.size), "optimizer");
    t.writeFlat(t.v, o.v.subarray(0, t.size), "optimizer");
    this.headOptimizer = { step: o.step, m: o.m.slice(t.size), v: o.v.slice(t.size) };
  }

  private validate(batch: TokenBatch): void {
    validateBatch(batch);
    checkTokenRanges(this.config, batch.inputIds, batch.positionIds);
  }

  /** The decoder's forward on a micro-batch, encoded; its final hidden rows before each response token, read back. */
  private async selectedHidden(
    micro: TokenBatch,
  ): Promise<{ ws: ReturnType<GpuModel["forward"]>; hSel: Float32Array; shape: ReturnType<typeof microInputs>["shape"] }> {
    const { shape, inputs } = microInputs(micro);
    const ws = this.model.forward(shape, inputs);
    const hSel = await this.ctx.read(ws.hSel, micro.n * micro.R * this.config.d_model);
    return { ws, hSel, shape };
  }

  private headForward(h: { hSel: Float32Array }, rows: number): Float32Array {
    const d = this.config.d_model;
    return valueHeadForward(h.hSel, this.head.subarray(0, d), this.head[d], rows, d) as Float32Array;
  }

  private async runValueStep(
    batch: TokenBatch,
    returns: Float32Array,
    oldValues: Float32Array,
    options: ValueStepOptions,
  ): Promise<ValueStepMetrics> {
    this.validate(batch);
    checkResponseTensor("returns", returns, batch);
    checkResponseTensor("oldValues", oldValues, batch);
    const cliprangeValue = resolveCliprangeValue(options.cliprangeValue);
    const { n, R } = batch;
    const d = this.config.d_model;
    const ctx = this.ctx;
    const mask = resolveResponseMask(batch);
    const norm = normFromMask(mask, n, R);
    const headGrads = new Float64Array(d + 1);
    const totals = { vf_loss: 0, vf_clipfrac: 0, vpred_mean: 0 };
    this.model.zeroGrads();
    for (const [r0, r1] of microBatches(n, options.microBatchSize)) {
      const rows = (r1 - r0) * R;
      const cut = (a: Float32Array): Float32Array => a.subarray(r0 * R, r1 * R);
      const h = await this.selectedHidden(sliceRows(batch, r0, r1));
      const loss = valueLoss(
        {
          rows: r1 - r0,
          cols: R,
          values: this.headForward(h, rows),
          returns: cut(returns),
          oldValues: cut(oldValues),
          responseMask: cut(mask),
        },
        { cliprangeValue, lossAggMode: options.lossAggMode },
        norm,
      );
      totals.vf_loss += loss.vf_loss;
      totals.vf_clipfrac += loss.vf_clipfrac;
      totals.vpred_mean += loss.vpred_mean;
      const g = valueHeadBackward(h.hSel, this.head.subarray(0, d), loss.dValues, rows, d);
      for (let j = 0; j < d; j++) headGrads[j] += g.dw[j];
      headGrads[d] += g.db;
      ctx.write(h.ws.dhSel, g.dh as Float32Array);
      this.model.backward(h.shape, h.ws);
    }
    // the global norm: the decoder's (GPU partial sums) and the head's
    const t = this.model.trained;
    const sums = ctx.alloc(1, "value_grad_norm");
    let decoderSq: number;
    try {
      t.layout.forEach((s, i) => sumSquares(ctx, t.grads[s.name], s.size, this.partials, i));
      columnSums(ctx, this.partials, sums, t.layout.length * SUMSQ_GROUPS, 1, 0);
      decoderSq = (await ctx.read(sums))[0];
    } finally {
      ctx.flushBeforeRelease();
      sums.destroy();
    }
    let headSq = 0;
    for (const x of headGrads) headSq += x * x;
    const gradNorm = Math.sqrt(decoderSq + headSq);
    const skipped = !Number.isFinite(totals.vf_loss) || !Number.isFinite(gradNorm);
    if (!skipped) {
      const optim = { ...this.optim, lr: options.lr ?? this.optim.lr };
      const grads = Float32Array.from(headGrads);
      const coef = clipGradNorm(grads, gradNorm, optim.maxGradNorm);
      adamwStep(this.head, grads, this.headOptimizer, optim);
      const scalars = adamwScalars(optim, this.headOptimizer.step, coef);
      for (const s of t.layout) adamw(ctx, t.params[s.name], t.grads[s.name], t.m[s.name], t.v[s.name], s.size, scalars);
      await ctx.drain();
    }
    return { ...totals, grad_norm: gradNorm, tokens: norm.tokens, skipped, step: this.headOptimizer.step };
  }
}
