/**
 * Batched generation for serving the policy: many prompts in, sampled continuations with the log-prob
 * of every sampled token out. The CPU engine runs `src/model/generate.ts` (KV cache) per request, on the
 * Wasm SIMD kernels over a worker pool of its own by default (`ops: "reference"`: plain TS); a GPU engine
 * plugs in through the same {@link GenerationEngine} interface.
 *
 * Stop strings are applied to the decoded text: the output ends with the token that completed the
 * first stop string, and the text is cut before it (the vLLM convention). Because sampling is
 * sequential, cutting a finished sequence gives exactly what stopping early would have given; the WebGPU
 * engine stops a sequence on the step whose token completes a stop string, the CPU engine decodes on to
 * the limit and cuts. The text of each prefix comes from an incremental decoder (detokenize.ts).
 */
import { EngineOps, type CpuEngineOptions } from "../cpu/backend.ts";
import type { ModelConfig } from "../model/config.ts";
import { generate } from "../model/generate.ts";
import type { ModelOps } from "../model/ops-backend.ts";
import { paramViews, type ModelParams, type ParamViews } from "../model/params.ts";
import { loraState, type LoraWeights } from "../model/reference.ts";
import { byteTokenizer } from "../model/tokenizer.ts";
import type { Tokenizer } from "../model/tokenizer-api.ts";
import { ValidationError } from "../types/errors.ts";
import { decodeIds, decodeWithOffsets, findStopString } from "./detokenize.ts";

export interface GenerationRequest {
  /** Prompt token ids (at least one). */
  prompt: number[];
  /** Most new tokens; the model's max_seq_len also caps prompt + output. */
  maxTokens: number;
  /** 0 is greedy [1]. */
  temperature?: number;
  /** Nucleus mass in (0, 1] [1]. */
  topP?: number;
  /** Strings that end the output (cut from the text, kept in the token ids) [none]. */
  stop?: readonly string[];
  /** Token ids that end the output (kept in the token ids) [the tokenizer's eosTokenIds]. */
  stopTokenIds?: readonly number[];
  /** Sampler seed [0]. */
  seed?: number;
}

export type FinishReason = "stop" | "length";

export interface Generation {
  /** Sampled token ids, the stop token included. */
  tokenIds: number[];
  /** log p(token) under the policy (temperature 1, no top-p) for each sampled token, normalised over the
   * ids the tokenizer has (see {@link tokenizerVocabLimit}). */
  logprobs: number[];
  /** Decoded text without special tokens, cut before a matched stop string. */
  text: string;
  finishReason: FinishReason;
}

/** Something that turns requests into generations for a given set of weights (and the tokenizer that
 * turns their tokens into text [the byte tokenizer]), optionally with a LoRA adapter applied on top of
 * them unmerged (so a new adapter version replaces only the adapter, never the base). */
export interface GenerationEngine {
  readonly backend: "cpu" | "webgpu";
  /** Frees what the engine holds (a CPU engine's worker threads); it cannot generate afterwards. */
  close?(): void;
  generate(
    config: ModelConfig,
    params: ModelParams,
    requests: readonly GenerationRequest[],
    tokenizer?: Tokenizer,
    adapter?: LoraWeights,
  ): Promise<Generation[]>;
}

/** Cuts `tokens` at the first stop string found in their decoded text; null when none occurs. */
export function applyStopStrings(
  tokens: readonly number[],
  stop: readonly string[],
  tokenizer: Tokenizer = byteTokenizer,
): { keep: number; text: string } | null {
  if (!stop.some((s) => s.length > 0)) return null;
  return findStopString(decodeWithOffsets(tokenizer, tokens), stop);
}

/** Finishes one raw sample: stop strings, text. */
export function finishGeneration(
  tokens: number[],
  logprobs: number[],
  finishReason: FinishReason,
  stop: readonly string[] = [],
  tokenizer: Tokenizer = byteTokenizer,
): Generation {
  const cut = applyStopStrings(tokens, stop, tokenizer);
  if (cut) return { tokenIds: tokens.slice(0, cut.keep), logprobs: logprobs.slice(0, cut.keep), text: cut.text, finishReason: "stop" };
  return { tokenIds: tokens, logprobs, text: decodeIds(tokenizer, tokens), finishReason };
}

/**
 * The `vocabLimit` every engine samples under: the tokenizer's vocabSize when the model's vocab is padded
 * past it (ids there have no text; sampling one made the server fail on its own output), else undefined.
 */
export function tokenizerVocabLimit(config: ModelConfig, tokenizer: Tokenizer): number | undefined {
  return tokenizer.vocabSize < config.vocab_size ? tokenizer.vocabSize : undefined;
}

export function validateRequest(config: ModelConfig, r: GenerationRequest, index = 0): void {
  if (!Array.isArray(r.prompt) || r.prompt.length === 0)
    throw new ValidationError("prompt must hold at least one token", ["requests", index, "prompt"]);
  if (r.prompt.length >= config.max_seq_len)
    throw new ValidationError(`prompt of ${r.prompt.length} tokens leaves no room to generate (max_seq_len ${config.max_seq_len})`, [
      "requests",
      index,
      "prompt",
    ]);
  r.prompt.forEach((id, j) => {
    if (!(Number.isInteger(id) && id >= 0 && id < config.vocab_size))
      throw new ValidationError(`token id ${id} is outside the vocabulary`, ["requests", index, "prompt", j]);
  });
}

/**
 * The CPU engine: one KV-cached sequence at a time. On the Wasm ops the weights stay resident in the
 * engine's Wasm memory: copied in when the engine first sees a weights object (or adapter), re-copied
 * only when it is handed a different one (a new policy version: ModelPolicy publishes copies). The engine
 * recognises weights by identity, so a caller must not change a buffer in place between calls.
 */
export class CpuGenerationEngine implements GenerationEngine {
  readonly backend = "cpu" as const;
  private readonly ops: EngineOps;
  /** The resident base and adapter: what they were made from, their views, where the adapter starts. */
  private base: { config: ModelConfig; params: ModelParams; views: ParamViews; adapterMark: number } | null = null;
  private adapter: { from: LoraWeights; weights: LoraWeights } | null = null;

  constructor(options: CpuEngineOptions = {}) {
    this.ops = new EngineOps(options);
  }

  /** "wasm" or "reference". */
  get opsChoice(): "wasm" | "reference" {
    return this.ops.choice;
  }

  /** Ends the Wasm engine's worker threads; the engine cannot generate afterwards. */
  close(): void {
    this.ops.close();
  }

  async generate(
    config: ModelConfig,
    params: ModelParams,
    requests: readonly GenerationRequest[],
    tokenizer: Tokenizer = byteTokenizer,
    adapter?: LoraWeights,
  ): Promise<Generation[]> {
    requests.forEach((r, i) => validateRequest(config, r, i));
    const K = await this.ops.get();
    // from here on synchronous: concurrent calls cannot interleave their use of the resident memory
    const { views, lora } = this.weights(K, config, params, adapter);
    const vocabLimit = tokenizerVocabLimit(config, tokenizer);
    return requests.map((r) => {
      const out = generate(config, views, r.prompt, {
        maxTokens: r.maxTokens,
        temperature: r.temperature,
        topP: r.topP,
        stop: [...(r.stopTokenIds ?? tokenizer.eosTokenIds)],
        seed: r.seed,
        vocabLimit,
        lora,
        kernels: K,
      });
      return finishGeneration(out.tokens, out.logprobs, out.finishReason, r.stop, tokenizer);
    });
  }

  /** The weights' views, made resident when they are new: the base first, the adapter above it. */
  private weights(K: ModelOps, config: ModelConfig, params: ModelParams, adapter?: LoraWeights): { views: ParamViews; lora?: LoraWeights } {
    const r = K.resident;
    if (this.base?.params !== params || this.base.config !== config) {
      r?.release();
      this.adapter = null;
      const views = paramViews(config, params as Float32Array);
      r?.pin(Object.values(views));
      this.base = { config, params, views, adapterMark: r?.mark() ?? 0 };
    }
    if (this.adapter?.from !== adapter) {
      r?.release(this.base.adapterMark);
      this.adapter = null;
      if (adapter) {
        const weights = { config: adapter.config, params: loraState(config, adapter).views as ParamViews };
        r?.pin(Object.values(weights.params));
        this.adapter = { from: adapter, weights };
      }
    }
    return { views: this.base.views, lora: this.adapter?.weights };
  }
}

/** The default CPU engine (Wasm ops on every CPU; its pool starts on first use). */
export const cpuGenerationEngine: GenerationEngine = new CpuGenerationEngine();

/** The plain-TS engine: the oracle the Wasm engine is tested against. */
export const referenceGenerationEngine: GenerationEngine = new CpuGenerationEngine({ ops: "reference" });
