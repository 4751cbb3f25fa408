/**
 * The critic on the CPU engine (docs/training.md#the-critic): the value model's forward and backward
 * (src/model/reference/value-model.ts: the policy's decoder with a value head in place of the LM head) on
 * the same ops as the CPU policy trainer (Wasm SIMD kernels on a worker pool, or the plain-TS reference),
 * verl's clipped value loss (src/model/value-loss.ts), and the policy trainer's update: global grad-norm
 * clipping, then AdamW (`clippedAdamwStep`). Full fine-tuning: every decoder weight and the head train.
 *
 * A step splits the batch into micro-batches of `microBatchSize` rows whose gradients add up; the loss
 * normalisers come from the whole step's response mask, so micro-batching changes memory, not the result.
 */
import { checkResponseTensor, microBatches, resolveResponseMask, sliceRows, validateBatch } from "../model/batch.ts";
import { parseModelConfig, type ModelConfig } from "../model/config.ts";
import { withActivations, type ModelOps } from "../model/model-ops.ts";
import type { ModelParams } from "../model/params.ts";
import { normFromMask } from "../model/ppo-loss.ts";
import { clippedAdamwStep, copyOptimizerState, newOptimizerState, resolveOptimizerOptions } from "../model/reference/optim.ts";
import { positionGradients, responseValues, valueBackward, valueForward } from "../model/reference/value-model.ts";
import type { OptimizerOptions, OptimizerState, StepOptions, TokenBatch } from "../model/train-types.ts";
import { resolveCliprangeValue, valueLoss } from "../model/value-loss.ts";
import { initValueParams, valueParamCount, valueParamsFromPolicy } from "../model/value-params.ts";
import type { ValueStepMetrics, ValueStepOptions, ValueTrainer, ValueTrainerState } from "../model/value-types.ts";
import { ValidationError } from "../types/errors.ts";
import { CpuBackend, type CpuEngineOptions } from "./backend.ts";

export interface CpuValueTrainerOptions extends OptimizerOptions, CpuEngineOptions {
  /** The critic's architecture: the policy's config, or a smaller one (same vocabulary). */
  config: ModelConfig;
  /** The policy's weights to start from (flat in `paramLayout(config)` order, or tensors by name as
   * `loadPretrained` gives them): the decoder copies them, the LM head is dropped, the value head is fresh. */
  policyParams?: ModelParams;
  /** A critic's own parameters (`valueLayout(config)` order, e.g. `getState().params`) to resume from. */
  params?: Float32Array;
  /** Seed of the fresh value head, and of the whole model when neither `params` nor `policyParams` is given [0]. */
  seed?: number;
  /** Optimizer state to resume from. */
  optimizer?: OptimizerState;
}

/** A critic on the CPU engine; `close()` ends its worker threads. */
export class CpuValueTrainer implements ValueTrainer {
  readonly backend = "cpu" as const;
  readonly config: ModelConfig;
  private params: Float32Array;
  private optimizer: OptimizerState;
  private readonly optim: Required<OptimizerOptions>;
  private readonly cpu: CpuBackend;

  constructor(options: CpuValueTrainerOptions) {
    this.config = parseModelConfig(options.config);
    const size = valueParamCount(this.config);
    if (options.params !== undefined && options.policyParams !== undefined)
      throw new ValidationError("give params (a critic's) or policyParams (a policy's), not both", ["params"]);
    if (options.params !== undefined && options.params.length !== size)
      throw new ValidationError(`params has ${options.params.length} elements, the critic's config needs ${size}`, ["params"]);
    const seed = options.seed ?? 0;
    this.params =
      options.params?.slice() ??
      (options.policyParams !== undefined
        ? valueParamsFromPolicy(this.config, options.policyParams, seed)
        : initValueParams(this.config, seed));
    this.optimizer = options.optimizer ? copyOptimizerState(options.optimizer) : newOptimizerState(size);
    if (this.optimizer.m.length !== size || this.optimizer.v.length !== size)
      throw new ValidationError(`optimizer state has ${this.optimizer.m.length} elements, the critic's config needs ${size}`, [
        "optimizer",
      ]);
    this.optim = resolveOptimizerOptions(options);
    // activations stay in Wasm memory between forward and backward (withActivations below)
    this.cpu = new CpuBackend(options, { keepActivations: true });
  }

  /** Which ops the trainer runs on ("wasm" or "reference"). */
  get opsChoice(): "wasm" | "reference" {
    return this.cpu.choice;
  }

  /** Ends the Wasm engine's worker threads; the trainer cannot run afterwards. */
  close(): void {
    this.cpu.close();
  }

  async values(batch: TokenBatch, options: StepOptions = {}): Promise<Float32Array> {
    validateBatch(batch);
    const { n, P, R } = batch;
    const mask = resolveResponseMask(batch);
    const out = new Float32Array(n * R);
    const K = await this.cpu.get();
    for (const [r0, r1] of microBatches(n, options.microBatchSize))
      withActivations(K, () => {
        const { values } = valueForward(this.config, this.params, sliceRows(batch, r0, r1), { ops: K });
        out.set(responseValues(values, r1 - r0, P, R), r0 * R);
      });
    // as verl: only response tokens have values
    for (let k = 0; k < out.length; k++) if (mask[k] === 0) out[k] = 0;
    return out;
  }

  async valueStep(
    batch: TokenBatch,
    returns: Float32Array,
    oldValues: Float32Array,
    options: ValueStepOptions = {},
  ): Promise<ValueStepMetrics> {
    validateBatch(batch);
    checkResponseTensor("returns", returns, batch);
    checkResponseTensor("oldValues", oldValues, batch);
    const cliprangeValue = resolveCliprangeValue(options.cliprangeValue);
    const K = await this.cpu.get();
    return this.step(K, batch, returns, oldValues, { ...options, cliprangeValue });
  }

  async getState(): Promise<ValueTrainerState> {
    return { config: { ...this.config }, params: this.params.slice(), optimizer: copyOptimizerState(this.optimizer) };
  }

  async setState(state: ValueTrainerState): Promise<void> {
    if (JSON.stringify(parseModelConfig(state.config)) !== JSON.stringify(this.config))
      throw new ValidationError("state was saved for a different model config", ["config"]);
    const size = this.params.length;
    if (state.params.length !== size || state.optimizer.m.length !== size || state.optimizer.v.length !== size)
      throw new ValidationError(`state tensors do not have the ${size} elements the critic's config needs`, ["params"]);
    this.params = state.params.slice();
    this.optimizer = copyOptimizerState(state.optimizer);
  }

  /** Forward, value loss and backward per micro-batch; then, if everything is finite, clip and AdamW. */
  private step(
    K: ModelOps,
    batch: TokenBatch,
    returns: Float32Array,
    oldValues: Float32Array,
    options: ValueStepOptions,
  ): ValueStepMetrics {
    const { n, P, R } = batch;
    const mask = resolveResponseMask(batch);
    const norm = normFromMask(mask, n, R);
    const grads = new Float32Array(this.params.length);
    const totals = { vf_loss: 0, vf_clipfrac: 0, vpred_mean: 0 };
    for (const [r0, r1] of microBatches(n, options.microBatchSize))
      withActivations(K, () => {
        const rows = r1 - r0;
        const cut = (a: Float32Array): Float32Array => a.subarray(r0 * R, r1 * R);
        const out = valueForward(this.config, this.params, sliceRows(batch, r0, r1), { ops: K });
        const loss = valueLoss(
          {
            rows,
            cols: R,
            values: responseValues(out.values, rows, P, R),
            returns: cut(returns),
            oldValues: cut(oldValues),
            responseMask: cut(mask),
          },
          options,
          norm,
        );
        totals.vf_loss += loss.vf_loss;
        totals.vf_clipfrac += loss.vf_clipfrac;
        totals.vpred_mean += loss.vpred_mean;
        const g = valueBackward(this.config, this.params, out.cache, positionGradients(loss.dValues, rows, P, R));
        for (let i = 0; i < grads.length; i++) grads[i] += g[i];
      });
    const optim = { ...this.optim, lr: options.lr ?? this.optim.lr };
    const { gradNorm, skipped } = clippedAdamwStep(this.params, grads, this.optimizer, optim, totals.vf_loss, K.adamwStep.bind(K));
    return { ...totals, grad_norm: gradNorm, tokens: norm.tokens, skipped, step: this.optimizer.step };
  }
}

/** A critic on the CPU engine (see {@link CpuValueTrainerOptions}). */
export function createCpuValueTrainer(options: CpuValueTrainerOptions): CpuValueTrainer {
  return new CpuValueTrainer(options);
}
