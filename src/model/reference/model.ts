/**
 * The whole policy model forward and backward in plain TypeScript, built from the ops in
 * `reference/ops.ts`: the oracle for the WebGPU trainer and the engine of the CPU fallback.
 * Generic over the parameter buffer's element type (Float64Array for gradient checks).
 * Model conventions (layout, RoPE, attention visibility, log-prob shift) are in `config.ts`.
 * An op's result may be owned by the backend (a view over Wasm memory inside an activation scope,
 * `Residency.scoped` in model-ops.ts): results edited in place (biases, LoRA updates, gradient sums) are
 * edited through the backend's ops or directly on that view, never on a copy; `forward`'s logits and cache
 * live as long as the scope.
 */
import { assertSeqLen, headDim, paramCount, type ModelConfig } from "../config.ts";
import { loraLayout, loraParamCount, loraState, type LoraState, type LoraWeights } from "../lora.ts";
import { paramViews } from "../params.ts";
import type { TokenBatch } from "../train-types.ts";
import { ValidationError } from "../../types/errors.ts";
import * as ops from "./ops.ts";
import type { Arr } from "./ops.ts";
import { referenceOps, withActivationsKeep, type ModelOps } from "../model-ops.ts";

/** The part of a batch the forward pass reads; the row width T is `inputIds.length / n`. */
export type ModelInput = Pick<TokenBatch, "n" | "inputIds" | "attentionMask" | "positionIds">;

/** Rows and row width of an input. */
export function inputShape(input: ModelInput): { B: number; T: number } {
  return { B: input.n, T: input.n > 0 ? input.inputIds.length / input.n : 0 };
}

/** Activations of one block, kept for the backward. */
export interface LayerCache {
  xIn: Arr;
  h1: Arr;
  rstd1: Arr;
  /** q and k before the per-head norm and their rstd (qk_norm configs only). */
  qPre?: Arr;
  kPre?: Arr;
  qRstd?: Arr;
  kRstd?: Arr;
  /** q and k as RoPE received them (after bias and qk-norm). */
  qIn?: Arr;
  kIn?: Arr;
  qr: Arr;
  kr: Arr;
  v: Arr;
  probs: Arr;
  attn: Arr;
  xMid: Arr;
  h2: Arr;
  rstd2: Arr;
  gate: Arr;
  up: Arr;
  act: Arr;
  xOut: Arr;
  /** `x · lora_a` of each adapted projection, by weight name (wq, w_up, ...). */
  loraT?: Record<string, Arr>;
}

/** Activations of the decoder (every block, then the final norm) kept for its backward. */
export interface DecoderCache {
  input: ModelInput;
  /** The ops backend the forward ran on; the backward uses the same. */
  ops: ModelOps;
  /** The adapter the forward ran with, if any. */
  lora?: LoraState;
  layers: LayerCache[];
  xFinal: Arr;
  /** [B*T, d] the final norm's output: what a head reads. */
  hFinal: Arr;
  rstdFinal: Arr;
}

/** Activations kept by {@link forward} for {@link backward}: the decoder's and the LM head's. */
export interface ForwardCache extends DecoderCache {
  /** Next-token targets per row: inputIds[b, t+1] (0 at the last column, whose prediction is unused). */
  targets: Int32Array;
  /** The logits divided by `temperature`. */
  logits: Arr;
  temperature: number;
  lse: Arr;
  entropyRows: Arr;
}

export interface ForwardResult<A extends Arr> {
  /** [B*T, vocab] logits at every position, divided by the temperature. */
  logits: A;
  /** [B, T] log-prob of inputIds[b,t] predicted from position t-1; 0 at t = 0. */
  logprob: A;
  /** [B, T] entropy of that prediction; 0 at t = 0. */
  entropy: A;
  cache: ForwardCache;
}

function validateInput(config: ModelConfig, input: ModelInput): { B: number; T: number } {
  const { B, T } = inputShape(input);
  if (!Number.isInteger(T) || T < 1)
    throw new ValidationError(`inputIds has ${input.inputIds.length} elements, not a multiple of n = ${B}`, ["inputIds"]);
  for (const key of ["attentionMask", "positionIds"] as const) {
    if (input[key].length !== B * T) throw new ValidationError(`${key} has ${input[key].length} elements, expected ${B * T}`, [key]);
  }
  assertSeqLen(config, T);
  return { B, T };
}

/** Sizes the forward and backward passes share, for N token rows. */
function dimsOf(config: ModelConfig, N: number) {
  const hd = headDim(config);
  return {
    N,
    d: config.d_model,
    hd,
    qDim: config.n_heads * hd,
    kvDim: config.n_kv_heads * hd,
    V: config.vocab_size,
    norm: { rows: N, dim: config.d_model, eps: config.norm_eps },
    qRope: { rows: N, heads: config.n_heads, headDim: hd, theta: config.rope_theta, scaling: config.rope_scaling },
    kRope: { rows: N, heads: config.n_kv_heads, headDim: hd, theta: config.rope_theta, scaling: config.rope_scaling },
  };
}

/** Attention over rotated q, k and v: full causal attention in training, a KV cache in decoding. */
export type AttendFn = (qr: Arr, kr: Arr, v: Arr) => { out: Arr; probs: Arr };

/** Transformer block `l` on rows x [N, d] (pre-norm attention, then pre-norm SwiGLU MLP) on the `K` backend. */
export function blockForward(
  config: ModelConfig,
  p: Record<string, Arr>,
  l: number,
  x: Arr,
  positions: ArrayLike<number>,
  attend: AttendFn,
  lora?: LoraState,
  K: ModelOps = referenceOps,
): LayerCache {
  const { N, d, qDim, kvDim, norm, qRope, kRope } = dimsOf(config, x.length / config.d_model);
  const w = (name: string): Arr => p[`layers.${l}.${name}`];
  const loraT: Record<string, Arr> = {};
  // x · W, plus scaling · (x · lora_a) · lora_b where an adapter targets W
  const proj = (name: string, input: Arr, dims: ops.MatDims): Arr => {
    const y = K.matmul(input, w(name), dims);
    const a = lora?.views[`layers.${l}.${name}.lora_a`];
    if (lora && a) {
      const r = lora.config.r;
      const t = K.matmul(input, a, { m: dims.m, k: dims.k, n: r });
      loraT[name] = t;
      const u = K.matmul(t, lora.views[`layers.${l}.${name}.lora_b`], { m: dims.m, k: r, n: dims.n });
      // in place on the backend's result (a view over Wasm memory inside an activation scope: the kernels
      // read that same memory, so later ops see the edit)
      for (let i = 0; i < y.length; i++) y[i] += lora.scaling * u[i];
    }
    return y;
  };
  const xIn = x;
  const { y: h1, rstd: rstd1 } = K.rmsnorm(xIn, w("attn_norm"), norm);
  let q = proj("wq", h1, { m: N, k: d, n: qDim });
  let k = proj("wk", h1, { m: N, k: d, n: kvDim });
  const v = proj("wv", h1, { m: N, k: d, n: kvDim });
  if (config.qkv_bias) {
    K.addBiasInPlace(q, w("bq"));
    K.addBiasInPlace(k, w("bk"));
    K.addBiasInPlace(v, w("bv"));
  }
  const qkNorm: Partial<LayerCache> = {};
  if (config.qk_norm) {
    const hd = headDim(config);
    const qn = K.rmsnorm(q, w("q_norm"), { rows: N * config.n_heads, dim: hd, eps: config.norm_eps });
    const kn = K.rmsnorm(k, w("k_norm"), { rows: N * config.n_kv_heads, dim: hd, eps: config.norm_eps });
    Object.assign(qkNorm, { qPre: q, kPre: k, qRstd: qn.rstd, kRstd: kn.rstd, qIn: qn.y, kIn: kn.y });
    q = qn.y;
    k = kn.y;
  }
  const qr = K.rope(q, positions, qRope);
  const kr = K.rope(k, positions, kRope);
  const { out: attn, probs } = attend(qr, kr, v);
  const xMid = K.add(xIn, proj("wo", attn, { m: N, k: qDim, n: d }));
  const { y: h2, rstd: rstd2 } = K.rmsnorm(xMid, w("ffn_norm"), norm);
  const gate = proj("w_gate", h2, { m: N, k: d, n: config.d_ff });
  const up = proj("w_up", h2, { m: N, k: d, n: config.d_ff });
  const act = K.swiglu(gate, up);
  const xOut = K.add(xMid, proj("w_down", act, { m: N, k: config.d_ff, n: d }));
  return { xIn, h1, rstd1, ...qkNorm, qr, kr, v, probs, attn, xMid, h2, rstd2, gate, up, act, xOut, ...(lora ? { loraT } : {}) };
}

/** Final RMSNorm and the lm head (tied: h @ tok_embeddings^T) on rows x [N, d]. */
export function headForward(
  config: ModelConfig,
  p: Record<string, Arr>,
  x: Arr,
  K: ModelOps = referenceOps,
): { hFinal: Arr; rstdFinal: Arr; logits: Arr } {
  const { y: hFinal, rstd: rstdFinal } = K.rmsnorm(x, p.norm, dimsOf(config, x.length / config.d_model).norm);
  return { hFinal, rstdFinal, logits: lmHeadForward(config, p, hFinal, K) };
}

/** The lm head alone on final-norm rows h [N, d]: logits [N, vocab]. */
function lmHeadForward(config: ModelConfig, p: Record<string, Arr>, hFinal: Arr, K: ModelOps): Arr {
  const { N, d, V } = dimsOf(config, hFinal.length / config.d_model);
  return config.tie_embeddings
    ? K.matmulABt(hFinal, p.tok_embeddings, { m: N, k: d, n: V })
    : K.matmul(hFinal, p.lm_head, { m: N, k: d, n: V });
}

/** Every block over a batch, each block's cache handed to `keep` (which decides what outlives the block):
 * the final hidden rows [B*T, d]. */
function trunk(
  config: ModelConfig,
  p: Record<string, Arr>,
  input: ModelInput,
  attend: AttendFn,
  keep: (layer: LayerCache) => void,
  lora: LoraState | undefined,
  K: ModelOps,
): Arr {
  let x = ops.embedding(input.inputIds, p.tok_embeddings, { vocab: config.vocab_size, dim: config.d_model });
  for (let l = 0; l < config.n_layers; l++) {
    const layer = blockForward(config, p, l, x, input.positionIds, attend, lora, K);
    keep(layer);
    x = layer.xOut;
  }
  return x;
}

function attentionDims(config: ModelConfig, B: number, T: number): ops.AttentionDims {
  return { batch: B, seq: T, heads: config.n_heads, kvHeads: config.n_kv_heads, headDim: headDim(config) };
}

/** One whole sequence as a model input: every token real, positions 0, 1, 2, ... */
export function sequenceInput(ids: ArrayLike<number>): ModelInput {
  const L = ids.length;
  return {
    n: 1,
    inputIds: Int32Array.from(ids),
    attentionMask: new Int32Array(L).fill(1),
    positionIds: Int32Array.from({ length: L }, (_, i) => i),
  };
}

/** What a prefill leaves: the last position's logits [vocab] and, per layer, the rotated keys and the
 * values of every position ([L, n_kv*hd] each), what a KV cache holds. */
export interface PrefillResult<A extends Arr> {
  logits: A;
  keys: A[];
  values: A[];
}

/**
 * Prefill for generation: one sequence through every block, keeping only each block's keys and values
 * (no attention probabilities, no other activations) and applying the lm head to the last row alone,
 * so a prompt of L tokens never materialises [L, vocab] logits (Qwen's 151,936-token vocabulary:
 * 311 MB at L = 512) nor the backward's activations (Qwen2.5-0.5B at L = 512: about 58 MB per layer, 1.4 GB in all).
 */
export function prefillForward<A extends Arr>(
  config: ModelConfig,
  params: A | Record<string, A>,
  ids: ArrayLike<number>,
  lora?: LoraState,
  K: ModelOps = referenceOps,
): PrefillResult<A> {
  const L = ids.length;
  const input = sequenceInput(ids);
  validateInput(config, input);
  const p = paramViews(config, params);
  const dims = attentionDims(config, 1, L);
  const attend: AttendFn = (qr, kr, v) => K.attention(qr, kr, v, input.attentionMask, dims, false);
  const keys: A[] = [];
  const values: A[] = [];
  const keepKv = (layer: LayerCache): void => {
    keys.push(layer.kr as A);
    values.push(layer.v as A);
  };
  const x = trunk(config, p, input, attend, keepKv, lora, K);
  const last = x.subarray((L - 1) * config.d_model, L * config.d_model) as Arr;
  return { logits: headForward(config, p, last, K).logits as A, keys, values };
}

/** Runs the model on a batch. `params` is the flat buffer in `paramLayout(config)` order, or tensors by name;
 * `options.lora` adds an adapter's updates to the projections it targets; `options.ops` picks the ops
 * backend (plain TS by default; the backward runs on the same); the logits are divided by
 * `options.temperature` [1] before the log-softmax, as verl's actor does with the rollouts' temperature. */
export function forward<A extends Arr>(
  config: ModelConfig,
  params: A | Record<string, A>,
  input: ModelInput,
  options: { lora?: LoraWeights<A>; ops?: ModelOps; temperature?: number } = {},
): ForwardResult<A> {
  const K = options.ops ?? referenceOps;
  const temperature = options.temperature ?? 1;
  const { cache: decoder } = decoderForward(config, params, input, options);
  const { B, T } = inputShape(input);
  const p = paramViews(config, params);
  const N = B * T;
  const logits = lmHeadForward(config, p, decoder.hFinal, K);
  if (temperature !== 1) for (let i = 0; i < logits.length; i++) logits[i] /= temperature;
  const V = config.vocab_size;

  const targets = new Int32Array(N);
  for (let b = 0; b < B; b++) for (let t = 0; t + 1 < T; t++) targets[b * T + t] = input.inputIds[b * T + t + 1];
  const rows = K.logSoftmaxGatherEntropy(logits, targets, { rows: N, vocab: V });
  // Shift: the prediction made at t-1 belongs to token t.
  const logprob = ops.alloc(logits, N);
  const entropy = ops.alloc(logits, N);
  for (let b = 0; b < B; b++)
    for (let t = 1; t < T; t++) {
      logprob[b * T + t] = rows.logprob[b * T + t - 1];
      entropy[b * T + t] = rows.entropy[b * T + t - 1];
    }
  return {
    logits: logits as A,
    logprob: logprob as A,
    entropy: entropy as A,
    cache: { ...decoder, targets, logits, temperature, lse: rows.lse, entropyRows: rows.entropy },
  };
}

/**
 * The decoder alone: every block, then the final norm, without the lm head (what a value head or any other
 * head reads). Same arguments as {@link forward}; `hidden` [B*T, d] lives as long as the activation scope.
 */
export function decoderForward<A extends Arr>(
  config: ModelConfig,
  params: A | Record<string, A>,
  input: ModelInput,
  options: { lora?: LoraWeights<A>; ops?: ModelOps } = {},
): { hidden: A; cache: DecoderCache } {
  const K = options.ops ?? referenceOps;
  const { B, T } = validateInput(config, input);
  const p = paramViews(config, params);
  const lora = options.lora ? loraState(config, options.lora) : undefined;
  const dims = attentionDims(config, B, T);
  const attend: AttendFn = (qr, kr, v) => K.attention(qr, kr, v, input.attentionMask, dims);
  const layers: LayerCache[] = [];
  const x = trunk(config, p, input, attend, (layer) => void layers.push(layer), lora, K);
  const { y: hFinal, rstd: rstdFinal } = K.rmsnorm(x, p.norm, dimsOf(config, B * T).norm);
  return { hidden: hFinal as A, cache: { input, ops: K, lora, layers, xFinal: x, hFinal, rstdFinal } };
}

/**
 * Gradients of a scalar loss with respect to every parameter, given dL/dlogprob and dL/dentropy per
 * token ([B, T], aligned with {@link forward}'s outputs; values at t = 0 are ignored). Returns a flat
 * buffer in the parameter layout (whichever form `params` had), of `params`' element type. With an
 * adapter in the cache, its updates are part of the path (their own gradients: {@link backwardLora}).
 */
export function backward<A extends Arr>(
  config: ModelConfig,
  params: A | Record<string, A>,
  cache: ForwardCache,
  dlogprob: ArrayLike<number>,
  dentropy: ArrayLike<number>,
): A {
  return backwardImpl(config, params, cache, (run) => lmHeadBackward(run, cache, dlogprob, dentropy), true).base as A;
}

/**
 * Gradients of a scalar loss with respect to every decoder parameter, given dL/dhidden [B*T, d] of
 * {@link decoderForward}'s output (a head's backward hands it over): a flat buffer in the parameter layout,
 * of `params`' element type (the layout's lm_head, if any, gets 0).
 */
export function decoderBackward<A extends Arr>(config: ModelConfig, params: A | Record<string, A>, cache: DecoderCache, dHidden: Arr): A {
  return backwardImpl(config, params, cache, () => dHidden, true).base as A;
}

/**
 * Gradients of the adapter the forward ran with (`forward(..., { lora })`), the base frozen: a flat buffer in
 * `loraLayout` order. The base weights' own gradients are never computed.
 */
export function backwardLora<A extends Arr>(
  config: ModelConfig,
  params: A | Record<string, A>,
  cache: ForwardCache,
  dlogprob: ArrayLike<number>,
  dentropy: ArrayLike<number>,
): A {
  if (!cache.lora) throw new ValidationError("the forward ran without an adapter: pass { lora } to forward", ["lora"]);
  return backwardImpl(config, params, cache, (run) => lmHeadBackward(run, cache, dlogprob, dentropy), false).lora as A;
}

/** What the pieces of one backward pass share: weights, backend, sizes, and where the gradients go. */
interface BackwardRun {
  config: ModelConfig;
  p: Record<string, Arr>;
  K: ModelOps;
  cache: DecoderCache;
  /** Views of the base's gradient buffer by parameter name; null when the base is frozen. */
  g: Record<string, Arr> | null;
  /** Views of the adapter's gradient buffer by name; null unless the adapter trains (the base frozen). */
  lg: Record<string, Arr> | null;
  dims: ReturnType<typeof dimsOf>;
  attnDims: ops.AttentionDims;
}

/** The backward from the head down: `head` gives dL/dhFinal (and its own weights' gradients), then the
 * final norm, every block and the embedding. */
function backwardImpl<A extends Arr>(
  config: ModelConfig,
  params: A | Record<string, A>,
  cache: DecoderCache,
  head: (run: BackwardRun) => Arr,
  trainBase: boolean,
): { base: Arr | null; lora: Arr | null } {
  const p = paramViews(config, params);
  const K = cache.ops;
  // Base gradients go to a real buffer, or (frozen base) to a throwaway sink: the norms' and biases' small
  // dw are computed either way, the matrices' large ones only when the base trains.
  const grads = trainBase ? (ops.alloc(p.tok_embeddings, paramCount(config)) as A) : null;
  const lora = cache.lora;
  const loraGrads = lora && !trainBase ? ops.alloc(p.tok_embeddings, loraParamCount(config, lora.config)) : null;
  let lg: Record<string, Arr> | null = null;
  if (lora && loraGrads) {
    lg = {};
    for (const s of loraLayout(config, lora.config)) lg[s.name] = loraGrads.subarray(s.offset, s.offset + s.size) as Arr;
  }
  const { B, T } = inputShape(cache.input);
  const run: BackwardRun = {
    config,
    p,
    K,
    cache,
    g: grads ? paramViews(config, grads) : null,
    lg,
    dims: dimsOf(config, B * T),
    attnDims: attentionDims(config, B, T),
  };

  // The head, then each layer, in a nested activation scope: only its dx stays, so the backward holds one
  // layer's temporaries at a time (on the reference this is just the call).
  let dx = withActivationsKeep(K, () => finalNormBackward(run, head(run)));
  for (let l = config.n_layers - 1; l >= 0; l--) {
    const dxOut = dx;
    dx = withActivationsKeep(K, () => blockBackward(run, l, dxOut));
  }
  if (run.g) ops.addInPlace(run.g.tok_embeddings, ops.embeddingBackward(cache.input.inputIds, dx, { vocab: run.dims.V, dim: run.dims.d }));
  return { base: grads, lora: loraGrads };
}

/** Writes a base parameter's gradient (dropped when the base is frozen). */
function setGrad(run: BackwardRun, name: string, value: Arr): void {
  run.g?.[name].set(value);
}

/** dL/dx of the final norm's input from dL/dhFinal (the norm's gradient when the base trains). */
function finalNormBackward(run: BackwardRun, dh: Arr): Arr {
  const fin = run.K.rmsnormBackward(run.cache.xFinal, run.p.norm, run.cache.rstdFinal, dh, run.dims.norm);
  setGrad(run, "norm", fin.dw);
  return fin.dx;
}

/** dL/dhFinal from the per-token gradients through the lm head (its gradient when the base trains). */
function lmHeadBackward(run: BackwardRun, cache: ForwardCache, dlogprob: ArrayLike<number>, dentropy: ArrayLike<number>): Arr {
  const { config, p, K, g } = run;
  const { N, d, V } = run.dims;
  const { B, T } = inputShape(cache.input);
  // Un-shift the per-token gradients onto the rows that made the predictions.
  const dlpRows = ops.alloc(p.tok_embeddings, N);
  const dentRows = ops.alloc(p.tok_embeddings, N);
  for (let b = 0; b < B; b++)
    for (let t = 1; t < T; t++) {
      dlpRows[b * T + t - 1] = dlogprob[b * T + t];
      dentRows[b * T + t - 1] = dentropy[b * T + t];
    }
  const dlogits = K.logSoftmaxGatherEntropyBackward(cache.logits, cache.targets, cache.lse, cache.entropyRows, dlpRows, dentRows, {
    rows: N,
    vocab: V,
  });
  // through the division by the temperature
  if (cache.temperature !== 1) for (let i = 0; i < dlogits.length; i++) dlogits[i] /= cache.temperature;

  let dh: Arr;
  if (config.tie_embeddings) {
    dh = K.matmul(dlogits, p.tok_embeddings, { m: N, k: V, n: d });
    if (g) g.tok_embeddings.set(K.matmulAtB(dlogits, cache.hFinal, { m: V, k: N, n: d }));
  } else if (g) {
    const r = K.matmulBackward(cache.hFinal, p.lm_head, dlogits, { m: N, k: d, n: V });
    dh = r.dx;
    g.lm_head.set(r.dw);
  } else dh = K.matmulABt(dlogits, p.lm_head, { m: N, k: V, n: d });
  return dh;
}

/**
 * dL/dx of `y = x · W (+ scaling · (x · lora_a) · lora_b)` in layer `l` given dy; W's gradient when the
 * base trains, the adapter's when it is frozen.
 */
function projectionBackward(run: BackwardRun, l: number, name: string, x: Arr, dy: Arr, dims: ops.MatDims): Arr {
  const { K, g, lg } = run;
  const lora = run.cache.lora;
  const key = `layers.${l}.${name}`;
  let dx: Arr;
  if (g) {
    const r = K.matmulBackward(x, run.p[key], dy, dims);
    setGrad(run, key, r.dw);
    dx = r.dx;
  } else dx = K.matmulABt(dy, run.p[key], { m: dims.m, k: dims.n, n: dims.k });
  const t = run.cache.layers[l].loraT?.[name];
  if (lora && t) {
    const r = lora.config.r;
    const dyScaled = ops.alloc(dy, dy.length);
    for (let i = 0; i < dy.length; i++) dyScaled[i] = lora.scaling * dy[i];
    const dt = K.matmulABt(dyScaled, lora.views[`${key}.lora_b`], { m: dims.m, k: dims.n, n: r });
    if (lg) {
      lg[`${key}.lora_b`].set(K.matmulAtB(t, dyScaled, { m: r, k: dims.m, n: dims.n }));
      lg[`${key}.lora_a`].set(K.matmulAtB(x, dt, { m: dims.k, k: dims.m, n: r }));
    }
    K.addInPlace(dx, K.matmulABt(dt, lora.views[`${key}.lora_a`], { m: dims.m, k: r, n: dims.k }));
  }
  return dx;
}

/** Block `l` backwards: dL/dx of its input from dL/dx of its output. */
function blockBackward(run: BackwardRun, l: number, dxOut: Arr): Arr {
  const dxMid = mlpBackward(run, l, dxOut);
  return attentionBlockBackward(run, l, dxMid);
}

/** The MLP half, `xOut = xMid + swiglu(norm(xMid)) @ w_down`: dL/dxMid. */
function mlpBackward(run: BackwardRun, l: number, dxOut: Arr): Arr {
  const { config, K } = run;
  const { N, d, norm: dims } = run.dims;
  const c = run.cache.layers[l];
  const downDx = projectionBackward(run, l, "w_down", c.act, dxOut, { m: N, k: config.d_ff, n: d });
  const { dgate, dup } = K.swigluBackward(c.gate, c.up, downDx);
  const gateDx = projectionBackward(run, l, "w_gate", c.h2, dgate, { m: N, k: d, n: config.d_ff });
  const upDx = projectionBackward(run, l, "w_up", c.h2, dup, { m: N, k: d, n: config.d_ff });
  K.addInPlace(gateDx, upDx);
  const n2 = K.rmsnormBackward(c.xMid, run.p[`layers.${l}.ffn_norm`], c.rstd2, gateDx, dims);
  setGrad(run, `layers.${l}.ffn_norm`, n2.dw);
  return K.add(dxOut, n2.dx);
}

/** The attention half, `xMid = xIn + attention(norm(xIn)) @ wo`: dL/dxIn. */
function attentionBlockBackward(run: BackwardRun, l: number, dxMid: Arr): Arr {
  const { config, K, g } = run;
  const { N, d, hd, qDim, kvDim, norm: dims, qRope, kRope } = run.dims;
  const c = run.cache.layers[l];
  const w = (name: string): Arr => run.p[`layers.${l}.${name}`];
  const gw = (name: string, value: Arr): void => setGrad(run, `layers.${l}.${name}`, value);
  const pos = run.cache.input.positionIds;
  const woDx = projectionBackward(run, l, "wo", c.attn, dxMid, { m: N, k: qDim, n: d });
  const a = K.attentionBackward(c.qr, c.kr, c.v, c.probs, woDx, run.attnDims);
  let dq = K.ropeBackward(a.dq, pos, qRope);
  let dk = K.ropeBackward(a.dk, pos, kRope);
  if (config.qk_norm) {
    const qn = K.rmsnormBackward(c.qPre!, w("q_norm"), c.qRstd!, dq, { rows: N * config.n_heads, dim: hd });
    const kn = K.rmsnormBackward(c.kPre!, w("k_norm"), c.kRstd!, dk, { rows: N * config.n_kv_heads, dim: hd });
    gw("q_norm", qn.dw);
    gw("k_norm", kn.dw);
    dq = qn.dx;
    dk = kn.dx;
  }
  if (config.qkv_bias) {
    if (g) {
      gw("bq", K.columnSums(dq, N, qDim));
      gw("bk", K.columnSums(dk, N, kvDim));
      gw("bv", K.columnSums(a.dv, N, kvDim));
    }
  }
  const qDx = projectionBackward(run, l, "wq", c.h1, dq, { m: N, k: d, n: qDim });
  const kDx = projectionBackward(run, l, "wk", c.h1, dk, { m: N, k: d, n: kvDim });
  const vDx = projectionBackward(run, l, "wv", c.h1, a.dv, { m: N, k: d, n: kvDim });
  K.addInPlace(qDx, kDx);
  K.addInPlace(qDx, vDx);
  const n1 = K.rmsnormBackward(c.xIn, w("attn_norm"), c.rstd1, qDx, dims);
  gw("attn_norm", n1.dw);
  return K.add(dxMid, n1.dx);
}
