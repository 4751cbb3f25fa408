/**
 * The critic on the CPU engine (docs/training.md#the-critic): the value model's forward and backward
 * (src/model/reference/value-model.ts: the policy's decoder with a value head in place of the LM head) on
 * the same ops as the CPU policy trainer (Wasm SIMD kernels on a worker pool, or the plain-TS reference),
 * verl's clipped value loss (src/model/value-loss.ts), and the policy trainer's update: global grad-norm
 * clipping, then AdamW (`clippedAdamwStep`). Full fine-tuning: every decoder weight and the head train.
 *
 * A step splits the batch into micro-batches of `microBatchSize` rows whose gradients add up; the loss
 * normalisers come from the whole step's response mask, so micro-batching changes memory, not the result.
 *
 * GAE reads the critic's values before its update, and the update's first forward would compute them again:
 * when `values()` runs its batch as one micro-batch, its forward's activations are kept, and the next
 * `valueStep` on the same tokens, with the critic unchanged since, runs its backward on them instead of a
 * second forward (the same bits; one forward of the critic's four per step fewer). Between the two calls the
 * trainer holds that batch's activations, as the step would; give `values()` a `microBatchSize` below the
 * batch's rows to hold none.
 */
import { checkResponseTensor, microBatches, resolveResponseMask, sliceRows, validateBatch } from "../model/batch.ts";
import { parseModelConfig, type ModelConfig } from "../model/config.ts";
import { withActivations, type ModelOps } from "../model/model-ops.ts";
import type { DecoderCache } from "../model/reference/model.ts";
import type { ModelParams } from "../model/params.ts";
import { normFromMask } from "../model/ppo-loss.ts";
import { clippedAdamwStep, copyOptimizerState, newOptimizerState, resolveOptimizerOptions } from "../model/reference/optim.ts";
import { positionGradients, responseValues, type ValueForwardResult, valueBackward, valueForward } from "../model/reference/value-model.ts";
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
  /** The last single-micro-batch `values()` forward, for the next `valueStep` on the same tokens; dropped
   * whenever the parameters change. */
  private kept: { tokens: TokenBatch; out: ValueForwardResult<Float32Array> } | null = null;

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
    this.kept = null;
    this.cpu.close();
  }

  async values(batch: TokenBatch, options: StepOptions = {}): Promise<Float32Array> {
    validateBatch(batch);
    const { n, P, R } = batch;
    const mask = resolveResponseMask(batch);
    const out = new Float32Array(n * R);
    const K = await this.cpu.get();
    const micro = microBatches(n, options.microBatchSize);
    this.kept = null;
    if (micro.length === 1)
      withActivations(K, () => {
        // the activations live in Wasm memory until the scope ends: copied out, they outlive the call
        const forward = valueForward(this.config, this.params, batch, { ops: K });
        const tokens = tokenCopy(batch);
        const cache = K.resident ? copyDecoderCache(forward.cache, tokens) : { ...forward.cache, input: tokens };
        this.kept = { tokens, out: { values: forward.values, cache } };
        out.set(responseValues(forward.values, n, P, R));
      });
    else
      for (const [r0, r1] of micro)
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
    this.kept = null;
  }

  /** The kept `values()` forward when it is of this batch's tokens and the step is one micro-batch; else
   * nothing, and the kept activations are let go before the step makes its own. */
  private keptForward(batch: TokenBatch, micro: Array<[number, number]>): ValueForwardResult<Float32Array> | null {
    const k = this.kept;
    if (k !== null && micro.length === 1 && sameTokens(k.tokens, batch)) return k.out;
    this.kept = null;
    return null;
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
    const micro = microBatches(n, options.microBatchSize);
    const kept = this.keptForward(batch, micro);
    for (const [r0, r1] of micro)
      withActivations(K, () => {
        const rows = r1 - r0;
        const cut = (a: Float32Array): Float32Array => a.subarray(r0 * R, r1 * R);
        const out = kept ?? valueForward(this.config, this.params, sliceRows(batch, r0, r1), { ops: K });
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
    if (!skipped) this.kept = null;
    return { ...totals, grad_norm: gradNorm, tokens: norm.tokens, skipped, step: this.optimizer.step };
  }
}

/** A decoder cache whose arrays are copies (of views over Wasm memory that an activation scope will free),
 * an array shared by two fields (a layer's output, the next one's input) copied once. */
function copyDecoderCache(c: DecoderCache, input: TokenBatch): DecoderCache {
  const copies = new Map<unknown, unknown>();
  const copyOf = (v: unknown): unknown => {
    if (!(v instanceof Float32Array || v instanceof Float64Array)) return v;
    if (!copies.has(v)) copies.set(v, v.slice());
    return copies.get(v);
  };
  const copy = <T extends object>(o: T): T => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, copyOf(v)])) as T;
  return {
    ...copy(c),
    input,
    layers: c.layers.map((l) => ({ ...copy(l), ...(l.loraT ? { loraT: copy(l.loraT) } : {}) })),
  };
}

/** A copy of a batch's tokens, positions and attention mask (what the critic's forward reads). */
function tokenCopy(batch: TokenBatch): TokenBatch {
  return {
    n: batch.n,
    P: batch.P,
    R: batch.R,
    inputIds: batch.inputIds.slice(),
    attentionMask: batch.attentionMask.slice(),
    positionIds: batch.positionIds.slice(),
  };
}

function sameTokens(a: TokenBatch, b: TokenBatch): boolean {
  if (a.n !== b.n || a.P !== b.P || a.R !== b.R) return false;
  for (const key of ["inputIds", "attentionMask", "positionIds"] as const) {
    const x = a[key];
    const y = b[key];
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
  }
  return true;
}

/** A critic on the CPU engine (see {@link CpuValueTrainerOptions}). */
export function createCpuValueTrainer(options: CpuValueTrainerOptions): CpuValueTrainer {
  return new CpuValueTrainer(options);
}
