/**
 * CPU generation with a KV cache: the fallback for serving the policy without WebGPU and the oracle
 * for GPU generation (greedy decoding must give the same tokens). One sequence at a time, no padding,
 * positions 0, 1, 2, ... The prompt is run through the reference forward once (prefill), then each
 * new token costs one decode step over the cache. On a backend with a resident memory (the Wasm ops) the
 * weights and the KV cache stay in it while a decoder lives, and the prefill and each step are one fused
 * backend call where the backend serves the model (`ModelOps.decodeStepper`), else op by op copying only
 * their activations.
 */
import { headDim, type ModelConfig } from "./config.ts";
import { Rng } from "./init.ts";
import { paramViews, type ModelParams } from "./params.ts";
import { blockForward, headForward, prefillForward, type AttendFn } from "./reference/model.ts";
import { loraState, type LoraState, type LoraWeights } from "./lora.ts";
import { referenceOps, type DecodeStepper, type ModelOps, type Residency } from "./model-ops.ts";
import * as ops from "./reference/ops.ts";
import { EOS_ID } from "./tokenizer.ts";
import type { TokenAlternative } from "./generation.ts";
import { ValidationError } from "../types/errors.ts";

export interface SamplingOptions {
  /** 0 means greedy (argmax, lowest id on ties) [1]. */
  temperature?: number;
  /** Nucleus sampling: keep the most likely tokens whose cumulative probability reaches topP [1]. */
  topP?: number;
  /** Ids at or above this are never drawn (greedy never picks them either): their logits count as
   * -Infinity, for sampling and for the returned log-prob. The engines pass the tokenizer's vocabSize when
   * the model's vocab is padded past it (our presets: 264 rows, 263 ids; Qwen2.5: 151,936 rows) [the
   * logits' length]. */
  vocabLimit?: number;
}

export interface GenerateOptions extends SamplingOptions {
  /** Most new tokens to produce; also capped by max_seq_len. */
  maxTokens: number;
  /** Token ids that end generation; the stop token is kept in the output [EOS]. */
  stop?: number[];
  /** Seed of the sampler [0]. */
  seed?: number;
  /** How many of the likeliest ids to report with each new token (`topLogProbs`) [0]. */
  topLogprobs?: number;
  /** An adapter applied to the base weights (src/model/lora.ts) [none]. */
  lora?: LoraWeights;
  /** The ops backend (src/model/model-ops.ts) [plain TS]. */
  ops?: ModelOps;
}

export interface GenerateResult {
  /** New token ids (the stop token included when one ended generation). */
  tokens: number[];
  /** log-prob of each new token under the model's distribution (temperature 1, no top-p) over the ids
   * below `vocabLimit`: what the sampler draws from at temperature 1. */
  logprobs: number[];
  /** With `topLogprobs` > 0: the likeliest ids at each new token, on the same distribution as `logprobs`. */
  alternatives?: TokenAlternative[][];
  finishReason: "stop" | "length";
}

/** How many leading logits may be drawn from: `vocabLimit` capped at the logits' length. */
export function allowedVocab(logits: ArrayLike<number>, vocabLimit?: number): number {
  if (vocabLimit === undefined) return logits.length;
  if (!(Number.isInteger(vocabLimit) && vocabLimit >= 1))
    throw new ValidationError(`vocabLimit must be a positive integer, got ${vocabLimit}`, ["vocabLimit"]);
  return Math.min(vocabLimit, logits.length);
}

/**
 * One token from logits: greedy at temperature 0, else softmax(logits / temperature) restricted to
 * the top-p nucleus (ties ordered by id), drawn with one `rng.uniform()`. Only ids below `vocabLimit`
 * take part.
 */
export function sampleToken(logits: ArrayLike<number>, options: SamplingOptions, rng: Rng): number {
  const temperature = options.temperature ?? 1;
  const topP = options.topP ?? 1;
  if (!(temperature >= 0)) throw new ValidationError(`temperature must be >= 0, got ${temperature}`, ["temperature"]);
  if (!(topP > 0 && topP <= 1)) throw new ValidationError(`top_p must be in (0, 1], got ${topP}`, ["top_p"]);
  const V = allowedVocab(logits, options.vocabLimit);
  if (temperature === 0) {
    let best = 0;
    for (let j = 1; j < V; j++) if (logits[j] > logits[best]) best = j;
    return best;
  }
  let max = -Infinity;
  for (let j = 0; j < V; j++) if (logits[j] > max) max = logits[j];
  const probs = new Float64Array(V);
  let sum = 0;
  for (let j = 0; j < V; j++) {
    probs[j] = Math.exp((logits[j] - max) / temperature);
    sum += probs[j];
  }
  const order = Array.from({ length: V }, (_, j) => j).sort((a, b) => probs[b] - probs[a] || a - b);
  // Nucleus: the smallest prefix whose mass reaches topP (the token that crosses it is kept).
  let keep = 0;
  let mass = 0;
  while (keep < V && mass < topP * sum) mass += probs[order[keep++]];
  const u = rng.uniform() * mass;
  let c = 0;
  for (let i = 0; i < keep; i++) {
    c += probs[order[i]];
    if (u < c) return order[i];
  }
  return order[keep - 1];
}

/** log softmax(logits)[id] over the ids below `vocabLimit` [all], computed stably: the log-prob of a
 * sampled token, shared by every engine. The trainer's log-probs are over the whole vocab; it recomputes
 * the old ones of the PPO ratio itself, so the two never mix (docs/serving.md, "Padded vocabularies"). */
export function logProbOf(logits: ArrayLike<number>, id: number, vocabLimit?: number): number {
  return logSoftmaxAt(logits, allowedVocab(logits, vocabLimit))(id);
}

/** log softmax over the first V logits, as a function of an id (max and log-sum computed once, stably). */
function logSoftmaxAt(logits: ArrayLike<number>, V: number): (id: number) => number {
  let max = -Infinity;
  for (let j = 0; j < V; j++) if (logits[j] > max) max = logits[j];
  let sum = 0;
  for (let j = 0; j < V; j++) sum += Math.exp(logits[j] - max);
  const logSum = Math.log(sum);
  return (id) => logits[id] - max - logSum;
}

/**
 * The `k` likeliest ids below `vocabLimit` and their log-probs on {@link logProbOf}'s distribution, likeliest
 * first (ties: the lower id first): what OpenAI's `top_logprobs` reports with each sampled token.
 */
export function topLogProbs(logits: ArrayLike<number>, k: number, vocabLimit?: number): TokenAlternative[] {
  const V = allowedVocab(logits, vocabLimit);
  return likeliest(logits, k, V, logSoftmaxAt(logits, V));
}

/**
 * What an engine records of a sampled token: its log-prob and, with `k` > 0, the k likeliest ids' (as
 * {@link logProbOf} and {@link topLogProbs}, over one log-softmax of the row).
 */
export function sampledTokenLogProbs(
  logits: ArrayLike<number>,
  token: number,
  k: number,
  vocabLimit?: number,
): { logprob: number; top?: TokenAlternative[] } {
  const V = allowedVocab(logits, vocabLimit);
  const logprob = logSoftmaxAt(logits, V);
  return k > 0 ? { logprob: logprob(token), top: likeliest(logits, k, V, logprob) } : { logprob: logprob(token) };
}

/** The k likeliest of the first V ids with their `logprob`, likeliest first (ties: the lower id first). */
function likeliest(logits: ArrayLike<number>, k: number, V: number, logprob: (id: number) => number): TokenAlternative[] {
  if (!(Number.isInteger(k) && k >= 0)) throw new ValidationError(`k must be a non-negative integer, got ${k}`, ["k"]);
  // the best k so far, kept sorted; k is small (at most 20 over the wire), so insertion beats sorting V ids
  const best: number[] = [];
  const better = (a: number, b: number) => logits[a] > logits[b] || (logits[a] === logits[b] && a < b);
  for (let j = 0; j < V && k > 0; j++) {
    if (best.length === k && !better(j, best[k - 1])) continue;
    let at = best.length === k ? k - 1 : best.length;
    while (at > 0 && better(j, best[at - 1])) at--;
    best.splice(at, 0, j);
    if (best.length > k) best.pop();
  }
  return best.map((id) => ({ id, logprob: logprob(id) }));
}

/**
 * KV-cached decoding of one sequence: `prefill` a prompt, then `step` one token at a time; each returns
 * the logits [vocab] of the last position. The cache (keys and values per layer, [slots, n_kv*hd] each)
 * is sized for one request's `slots` positions (prompt + new tokens), not max_seq_len: Hugging Face
 * models have 32k+ positions (Qwen2.5-0.5B: 24 layers x 2 x 128 floats = 24 KiB per position).
 */
export class CpuDecoder {
  private readonly p: Record<string, Float32Array>;
  private readonly k: Float32Array[];
  private readonly v: Float32Array[];
  private readonly kvDim: number;
  private readonly lora?: LoraState;
  /** The backend's resident memory and where this decoder's part of it starts. */
  private readonly resident?: { r: Residency; mark: number };
  /** The backend's fused step (whole model, one call), where it serves this model; the KV cache's
   * resident copy is then the only one kept up to date. */
  private readonly stepper: DecodeStepper | null = null;
  /** Positions filled so far. */
  length = 0;

  constructor(
    private readonly config: ModelConfig,
    params: ModelParams,
    readonly slots: number,
    lora?: LoraWeights,
    private readonly ops: ModelOps = referenceOps,
  ) {
    this.p = paramViews(config, params);
    this.lora = lora ? loraState(config, lora) : undefined;
    if (!(Number.isInteger(slots) && slots >= 1 && slots <= config.max_seq_len))
      throw new ValidationError(`KV cache slots must be an integer in [1, max_seq_len ${config.max_seq_len}], got ${slots}`, ["slots"]);
    this.kvDim = config.n_kv_heads * headDim(config);
    this.k = Array.from({ length: config.n_layers }, () => new Float32Array(slots * this.kvDim));
    this.v = Array.from({ length: config.n_layers }, () => new Float32Array(slots * this.kvDim));
    const r = this.ops.resident;
    if (r) {
      // weights already resident (an engine's, by identity) are not copied again
      this.resident = { r, mark: r.mark() };
      r.pin([...Object.values(this.p), ...Object.values(this.lora?.views ?? {})] as Float32Array[]);
      r.pin([...this.k, ...this.v]);
      this.stepper = this.ops.decodeStepper?.({ config, p: this.p, lora: this.lora, kCache: this.k, vCache: this.v, slots }) ?? null;
    }
  }

  /** Whether steps run as one fused backend call (else op by op). */
  get fused(): boolean {
    return this.stepper !== null;
  }

  /** Frees what this decoder made resident (weights an engine pinned before stay); it cannot step afterwards. */
  dispose(): void {
    this.resident?.r.release(this.resident.mark);
    this.length = this.slots;
  }

  private reserve(n: number, what: string): void {
    if (this.length + n > this.slots)
      throw new ValidationError(`${what} needs ${this.length + n} positions, the KV cache holds ${this.slots}`, [what]);
  }

  /** Runs the prompt (at least one token, into an empty cache) through every block; its last row's logits. */
  prefill(prompt: ArrayLike<number>): Float32Array {
    if (this.length !== 0) throw new ValidationError("prefill needs an empty KV cache", ["prompt"]);
    if (prompt.length === 0) throw new ValidationError("prompt must hold at least one token", ["prompt"]);
    this.reserve(prompt.length, "prompt");
    const fused = this.stepper?.prefill(prompt);
    if (fused) {
      this.length = prompt.length;
      return fused;
    }
    const out = prefillForward(this.config, this.p, prompt, this.lora, this.ops);
    for (let l = 0; l < this.config.n_layers; l++) {
      this.k[l].set(out.keys[l]);
      this.v[l].set(out.values[l]);
      this.resident?.r.write(this.k[l], 0, prompt.length * this.kvDim);
      this.resident?.r.write(this.v[l], 0, prompt.length * this.kvDim);
    }
    this.length = prompt.length;
    return out.logits;
  }

  /** One token through every layer against the cache (appending its k, v); its logits. */
  step(token: number): Float32Array {
    const { config, p, kvDim, ops: K } = this;
    this.reserve(1, "token");
    const at = this.length;
    if (this.stepper) {
      const logits = this.stepper.step(token, at);
      this.length += 1;
      return logits;
    }
    const dims = { heads: config.n_heads, kvHeads: config.n_kv_heads, headDim: headDim(config) };
    let x = ops.embedding([token], p.tok_embeddings, { vocab: config.vocab_size, dim: config.d_model });
    for (let l = 0; l < config.n_layers; l++) {
      const attend: AttendFn = (qr, kr, v) => {
        this.k[l].set(kr, at * kvDim);
        this.v[l].set(v, at * kvDim);
        this.resident?.r.write(this.k[l], at * kvDim, kvDim);
        this.resident?.r.write(this.v[l], at * kvDim, kvDim);
        return { out: K.attentionDecode(qr, this.k[l], this.v[l], at + 1, dims), probs: NO_PROBS };
      };
      x = blockForward(config, p, l, x, [at], attend, this.lora, K).xOut;
    }
    this.length += 1;
    return headForward(config, p, x, K).logits as Float32Array;
  }
}

const NO_PROBS = new Float32Array(0);

/** Continues `prompt` (token ids, at least one) with up to `maxTokens` new tokens. `params`: the flat
 * buffer or tensors by name. */
export function generate(config: ModelConfig, params: ModelParams, prompt: number[], options: GenerateOptions): GenerateResult {
  paramViews(config, params);
  if (prompt.length === 0) throw new ValidationError("prompt must hold at least one token", ["prompt"]);
  if (prompt.length > config.max_seq_len)
    throw new ValidationError(`prompt of ${prompt.length} tokens exceeds max_seq_len ${config.max_seq_len}`, ["prompt"]);
  if (!(Number.isInteger(options.maxTokens) && options.maxTokens >= 0))
    throw new ValidationError(`maxTokens must be a non-negative integer, got ${options.maxTokens}`, ["max_tokens"]);
  const stop = new Set(options.stop ?? [EOS_ID]);
  const rng = new Rng(options.seed ?? 0);
  // prompt + output never exceeds max_seq_len, so the whole sequence can be trained on
  const limit = Math.min(options.maxTokens, config.max_seq_len - prompt.length);
  const tokens: number[] = [];
  const logprobs: number[] = [];
  const k = options.topLogprobs ?? 0;
  const alternatives: TokenAlternative[][] | undefined = k > 0 ? [] : undefined;
  const result = (finishReason: "stop" | "length"): GenerateResult => ({
    tokens,
    logprobs,
    ...(alternatives ? { alternatives } : {}),
    finishReason,
  });
  if (limit === 0) return result("length");
  // the last new token is sampled, never run through the model: its k, v need no slot
  const decoder = new CpuDecoder(config, params, prompt.length + limit - 1, options.lora, options.ops);
  try {
    let logits = decoder.prefill(prompt);
    for (let i = 0; i < limit; i++) {
      const token = sampleToken(logits, options, rng);
      tokens.push(token);
      const scored = sampledTokenLogProbs(logits, token, k, options.vocabLimit);
      logprobs.push(scored.logprob);
      if (scored.top) alternatives?.push(scored.top);
      if (stop.has(token)) return result("stop");
      if (i + 1 < limit) logits = decoder.step(token);
    }
    return result("length");
  } finally {
    decoder.dispose();
  }
}
