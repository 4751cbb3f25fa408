/**
 * The CPU fallback trainer: the reference forward/backward (`src/model/reference/model.ts`) in float32, AdamW and
 * grad-norm clipping (`reference/optim.ts`), the PPO loss (`ppo-loss.ts`).
 * It trains anywhere. Same API and same math as the WebGPU trainer. The heavy ops run on the Wasm SIMD
 * kernels over a worker pool of the trainer's own (`ops`, `threads`; `close()` ends the workers), or on
 * the plain-TS reference with `ops: "reference"`; both give the same results within the kernels'
 * documented tolerances, and the Wasm ones the same bits on any thread count.
 *
 * With `lora`, the base weights stay frozen and only a LoRA adapter trains (src/model/lora.ts): the
 * forward adds the adapter, the backward forms the adapter's gradients only, AdamW and the state cover
 * the adapter alone, and `logProbs(batch, { baseOnly: true })` gives the base's reference log-probs.
 *
 * A step splits the batch into micro-batches of `microBatchSize` rows; the aggregation normalisers
 * come from the whole step's response mask, so micro-batching changes memory use, not the result
 * (up to float rounding of the accumulated gradient). clip_cov and kl_cov pick their tokens over the whole
 * step: with more than one micro-batch, a forward over the step comes first to find them.
 */
import { paramCount, parseModelConfig, type ModelConfig } from "../model/config.ts";
import { checkResponseTensor, logitTemperature, microBatches, resolveResponseMask, sliceRows, validateBatch } from "../model/batch.ts";
import { initParams } from "../model/init.ts";
import { initLora, loraParamCount, parseLoraConfig, type LoraConfig } from "../model/lora.ts";
import { flattenParams, paramViews, type ModelParams, type ParamViews } from "../model/params.ts";
import { CpuBackend, type CpuEngineOptions } from "./backend.ts";
import { withActivations, type ModelOps } from "../model/model-ops.ts";
import { backward, backwardLora, forward } from "../model/reference/model.ts";
import { clippedAdamwStep, copyOptimizerState, newOptimizerState, resolveOptimizerOptions } from "../model/reference/optim.ts";
import {
  aggLoss,
  aggWeights,
  covSelection,
  needsCovSelection,
  normFromMask,
  ppoPolicyLoss,
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

export interface CpuTrainerOptions extends OptimizerOptions, CpuEngineOptions {
  config: ModelConfig;
  /** Seed of the initial parameters when `params` is absent [0]. */
  seed?: number;
  /** Initial parameters (e.g. from a checkpoint or `loadPretrained`): the flat buffer or tensors by name,
   * copied into one flat buffer (the trainer's state and gradients are flat). */
  params?: ModelParams;
  /** Optimizer state to resume from. */
  optimizer?: OptimizerState;
  /** Train a LoRA adapter on frozen `base` weights instead of the whole model; `adapter` resumes one,
   * else PEFT's initialisation from `seed` [0]. */
  lora?: { config: LoraConfig; base: ModelParams; adapter?: Float32Array; seed?: number };
}

/** What a loss hands back for one micro-batch: its share of the loss and metrics, and per-token gradients. */
interface MicroLoss {
  parts: Partial<Record<"loss" | "pg_loss" | "clip_frac" | "clip_frac_lower" | "approx_kl" | "entropy", number>>;
  dLogProbs: ArrayLike<number>;
  dEntropy?: ArrayLike<number>;
}

type MicroLossFn = (rows: [number, number], logProbs: Float32Array, entropy: Float32Array, mask: Float32Array, norm: AggNorm) => MicroLoss;

/** Response columns [n, R] of a [n, T] per-token tensor. */
function responseColumns(x: ArrayLike<number>, n: number, P: number, R: number): Float32Array {
  const out = new Float32Array(n * R);
  for (let i = 0; i < n; i++) for (let t = 0; t < R; t++) out[i * R + t] = x[i * (P + R) + P + t];
  return out;
}

/** Scatter [n, R] response gradients back to [n, T] (prompt columns get 0). */
function fullColumns(x: ArrayLike<number>, n: number, P: number, R: number): Float32Array {
  const out = new Float32Array(n * (P + R));
  for (let i = 0; i < n; i++) for (let t = 0; t < R; t++) out[i * (P + R) + P + t] = x[i * R + t];
  return out;
}

function now(): number {
  return typeof performance !== "undefined" ? performance.now() : Date.now();
}

export class CpuTrainer implements PolicyTrainer {
  readonly backend = "cpu" as const;
  readonly config: ModelConfig;
  /** The trained parameters: the whole model's, or the adapter's with `lora`. */
  private params: Float32Array;
  private optimizer: OptimizerState;
  private readonly optim: Required<OptimizerOptions>;
  /** LoRA: the frozen base and the adapter's config. */
  private readonly lora: { config: LoraConfig; base: ParamViews<Float32Array> } | null;
  private readonly cpu: CpuBackend;

  constructor(options: CpuTrainerOptions) {
    this.config = parseModelConfig(options.config);
    // activations stay in Wasm memory between forward and backward (withActivations below)
    this.cpu = new CpuBackend(options, { keepActivations: true });
    // the base's views are made once, so the Wasm engine can keep the frozen base resident (by identity)
    this.lora = options.lora
      ? { config: parseLoraConfig(options.lora.config), base: paramViews(this.config, options.lora.base as Float32Array) }
      : null;
    const size = this.lora ? loraParamCount(this.config, this.lora.config) : paramCount(this.config);
    const given = this.lora ? options.lora?.adapter : options.params;
    if (given instanceof Float32Array && given.length !== size)
      throw new ValidationError(`${this.lora ? "adapter" : "params"} has ${given.length} elements, the config needs ${size}`, [
        this.lora ? "lora" : "params",
      ]);
    // tensors by name: flattenParams checks each one and copies them into a new flat buffer
    this.params =
      given === undefined
        ? this.lora
          ? initLora(this.config, this.lora.config, options.lora?.seed ?? 0)
          : initParams(this.config, options.seed ?? 0)
        : given instanceof Float32Array
          ? given.slice()
          : flattenParams(this.config, given);
    this.optimizer = options.optimizer ? copyOptimizerState(options.optimizer) : newOptimizerState(size);
    if (this.optimizer.m.length !== size || this.optimizer.v.length !== size)
      throw new ValidationError(`optimizer state has ${this.optimizer.m.length} elements, the config needs ${size}`, ["optimizer"]);
    this.optim = resolveOptimizerOptions(options);
  }

  /** Which ops the trainer runs on ("wasm" or "reference"). */
  get opsChoice(): "wasm" | "reference" {
    return this.cpu.choice;
  }

  /** Ends the Wasm engine's worker threads; the trainer cannot step afterwards. */
  close(): void {
    this.cpu.close();
  }

  /** The ops, started on first use; the frozen LoRA base made resident once. */
  private async ops(): Promise<ModelOps> {
    const K = await this.cpu.get();
    if (this.lora) K.resident?.pin(Object.values(this.lora.base));
    return K;
  }

  get loraConfig(): LoraConfig | null {
    return this.lora ? { ...this.lora.config } : null;
  }

  async logProbs(batch: TokenBatch, options: LogProbOptions = {}): Promise<LogProbsResult> {
    validateBatch(batch);
    const temperature = logitTemperature(options.temperature);
    const { n, P, R } = batch;
    const log_probs = new Float32Array(n * R);
    const entropy = new Float32Array(n * R);
    const K = await this.ops();
    for (const [r0, r1] of microBatches(n, options.microBatchSize))
      withActivations(K, () => {
        const out =
          options.baseOnly && this.lora
            ? forward(this.config, this.lora.base, sliceRows(batch, r0, r1), { ops: K, temperature })
            : this.forward(sliceRows(batch, r0, r1), K, temperature);
        log_probs.set(responseColumns(out.logprob, r1 - r0, P, R), r0 * R);
        entropy.set(responseColumns(out.entropy, r1 - r0, P, R), r0 * R);
      });
    return { log_probs, entropy };
  }

  async policyStep(
    batch: TokenBatch,
    advantages: Float32Array,
    oldLogProbs: Float32Array,
    options: PolicyStepOptions = {},
  ): Promise<StepMetrics> {
    validateBatch(batch);
    checkResponseTensor("advantages", advantages, batch);
    checkResponseTensor("oldLogProbs", oldLogProbs, batch);
    if (options.refLogProbs !== undefined) checkResponseTensor("refLogProbs", options.refLogProbs, batch);
    const o = resolveLossOptions(options);
    const temperature = logitTemperature(options.temperature);
    const { n, R } = batch;
    // clip_cov / kl_cov: the step's tokens picked once, seeded by the step count (the GPU trainer does the same)
    const seed = this.optimizer.step;
    let stepSelection: Uint8Array | undefined;
    if (needsCovSelection(o.lossMode) && microBatches(n, options.microBatchSize).length > 1) {
      const { log_probs } = await this.logProbs(batch, { microBatchSize: options.microBatchSize, temperature });
      const responseMask = resolveResponseMask(batch);
      stepSelection = covSelection({ rows: n, cols: R, logProbs: log_probs, oldLogProbs, advantages, responseMask }, o, seed);
    }
    return this.step(await this.ops(), batch, { ...options, temperature }, ([r0, r1], logProbs, entropy, mask, norm) => {
      const cut = <T extends { subarray(a: number, b: number): T }>(a: T): T => a.subarray(r0 * R, r1 * R);
      const input = {
        rows: r1 - r0,
        cols: R,
        logProbs,
        oldLogProbs: cut(oldLogProbs),
        advantages: cut(advantages),
        responseMask: mask,
        entropy,
        refLogProbs: options.refLogProbs && cut(options.refLogProbs),
      };
      // one micro-batch: it is the whole step, and its forward gives the log-probs the selection needs
      const covSelected = stepSelection ? cut(stepSelection) : needsCovSelection(o.lossMode) ? covSelection(input, o, seed) : undefined;
      const r = ppoPolicyLoss({ ...input, covSelected }, o, norm);
      return {
        parts: {
          loss: r.loss,
          pg_loss: r.pg_loss,
          clip_frac: r.clip_frac,
          clip_frac_lower: r.clip_frac_lower,
          approx_kl: r.approx_kl,
          entropy: r.entropy_loss,
        },
        dLogProbs: r.dLogProbs,
        dEntropy: r.dEntropy,
      };
    });
  }

  /** Cross-entropy of the response tokens, aggregated with `lossAggMode` [token-mean]. */
  async sftStep(batch: TokenBatch, options: SftStepOptions = {}): Promise<StepMetrics> {
    validateBatch(batch);
    const mode = options.lossAggMode ?? "token-mean";
    return this.step(await this.ops(), batch, options, ([r0, r1], logProbs, entropy, mask, norm) => {
      const rows = r1 - r0;
      const w = aggWeights(mask, rows, batch.R, mode, norm);
      const nll = -aggLoss(logProbs, mask, rows, batch.R, mode, norm);
      return {
        parts: { loss: nll, pg_loss: nll, entropy: aggLoss(entropy, mask, rows, batch.R, mode, norm) },
        dLogProbs: w.map((x) => -x),
      };
    });
  }

  async getState(): Promise<TrainerState> {
    return {
      config: { ...this.config },
      params: this.params.slice(),
      optimizer: copyOptimizerState(this.optimizer),
      ...(this.lora ? { lora: { ...this.lora.config } } : {}),
    };
  }

  async setState(state: TrainerState): Promise<void> {
    if (JSON.stringify(parseModelConfig(state.config)) !== JSON.stringify(this.config))
      throw new ValidationError("state was saved for a different model config", ["config"]);
    if (JSON.stringify(state.lora ?? null) !== JSON.stringify(this.lora?.config ?? null))
      throw new ValidationError("state was saved for a different LoRA config (or with/without one)", ["lora"]);
    const size = this.params.length;
    if (state.params.length !== size || state.optimizer.m.length !== size || state.optimizer.v.length !== size)
      throw new ValidationError(`state tensors do not have the ${size} elements the config needs`, ["params"]);
    this.params = state.params.slice();
    this.optimizer = copyOptimizerState(state.optimizer);
  }

  /** The model's forward on a micro-batch: the whole model, or the frozen base plus the adapter. */
  private forward(micro: TokenBatch, ops: ModelOps, temperature = 1) {
    return this.lora
      ? forward(this.config, this.lora.base, micro, { lora: { config: this.lora.config, params: this.params }, ops, temperature })
      : forward(this.config, this.params, micro, { ops, temperature });
  }

  /** Forward, loss and backward per micro-batch; then, if everything is finite, clip and AdamW. */
  private step(K: ModelOps, batch: TokenBatch, options: LogProbOptions, lossFn: MicroLossFn): StepMetrics {
    const started = now();
    const { n, P, R } = batch;
    const mask = resolveResponseMask(batch);
    const norm = normFromMask(mask, n, R);
    const grads = new Float32Array(this.params.length);
    const totals = { loss: 0, pg_loss: 0, clip_frac: 0, clip_frac_lower: 0, approx_kl: 0, entropy: 0 };
    // one activation scope per micro-batch: its forward's activations (and the backward's temporaries)
    // live in Wasm memory until its gradient is added to `grads`, then are freed at once; nothing the scope
    // returns (logits, cache) is used after it
    for (const [r0, r1] of microBatches(n, options.microBatchSize))
      withActivations(K, () => {
        const rows = r1 - r0;
        const micro = sliceRows(batch, r0, r1);
        const out = this.forward(micro, K, options.temperature);
        const logProbs = responseColumns(out.logprob, rows, P, R);
        const entropy = responseColumns(out.entropy, rows, P, R);
        const res = lossFn([r0, r1], logProbs, entropy, mask.subarray(r0 * R, r1 * R), norm);
        for (const [k, v] of Object.entries(res.parts)) totals[k as keyof typeof totals] += v;
        const dEntropy = res.dEntropy ? fullColumns(res.dEntropy, rows, P, R) : new Float32Array(rows * (P + R));
        const dLogProbs = fullColumns(res.dLogProbs, rows, P, R);
        const g = this.lora
          ? backwardLora(this.config, this.lora.base, out.cache, dLogProbs, dEntropy)
          : backward(this.config, this.params, out.cache, dLogProbs, dEntropy);
        for (let i = 0; i < grads.length; i++) grads[i] += g[i];
      });
    const optim = { ...this.optim, lr: options.lr ?? this.optim.lr };
    const { gradNorm, skipped } = clippedAdamwStep(this.params, grads, this.optimizer, optim, totals.loss, K.adamwStep.bind(K));
    const seconds = (now() - started) / 1000;
    return {
      ...totals,
      grad_norm: gradNorm,
      tokens_per_second: seconds > 0 ? norm.tokens / seconds : 0,
      tokens: norm.tokens,
      skipped,
      step: this.optimizer.step,
    };
  }
}
