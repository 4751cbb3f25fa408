/**
 * The generation contract every engine keeps (the CPU engines of src/cpu/generation.ts, the WebGPU one of
 * src/gpu/generation.ts): many prompts in, sampled continuations with the log-prob of every sampled token
 * out; request validation, stop strings and the vocab limit the engines sample under.
 *
 * Stop strings are applied to the decoded text: the output ends with the token that completed the
 * first stop string, and the text is cut before it (the vLLM convention). Because sampling is
 * sequential, cutting a finished sequence gives exactly what stopping early would have given; the WebGPU
 * engine stops a sequence on the step whose token completes a stop string, the CPU engine decodes on to
 * the limit and cuts. The text of each prefix comes from an incremental decoder (detokenize.ts).
 */
import type { ModelConfig } from "./config.ts";
import type { ModelParams } from "./params.ts";
import type { LoraWeights } from "./lora.ts";
import { byteTokenizer } from "./tokenizer.ts";
import type { Tokenizer } from "./tokenizer-api.ts";
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
  /** How many of the likeliest ids to report with each sampled token, 0 to {@link MAX_TOP_LOGPROBS} [0]. */
  topLogprobs?: number;
}

/** Most alternatives a request may ask for with each token (OpenAI's limit for `top_logprobs`). */
export const MAX_TOP_LOGPROBS = 20;

/** One of the likeliest ids at a sampled token's position, and its log-prob there. */
export interface TokenAlternative {
  id: number;
  logprob: number;
}

export type FinishReason = "stop" | "length";

export interface Generation {
  /** Sampled token ids, the stop token included. */
  tokenIds: number[];
  /** log p(token) under the policy (temperature 1, no top-p) for each sampled token, normalised over the
   * ids the tokenizer has (see {@link tokenizerVocabLimit}). */
  logprobs: number[];
  /** With a request's `topLogprobs` > 0: per sampled token, the likeliest ids at its position, likeliest first,
   * on the same distribution as `logprobs`. */
  topLogprobs?: TokenAlternative[][];
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
  alternatives?: TokenAlternative[][],
): Generation {
  const cut = applyStopStrings(tokens, stop, tokenizer);
  const keep = cut ? cut.keep : tokens.length;
  return {
    tokenIds: tokens.slice(0, keep),
    logprobs: logprobs.slice(0, keep),
    ...(alternatives ? { topLogprobs: alternatives.slice(0, keep) } : {}),
    text: cut ? cut.text : decodeIds(tokenizer, tokens),
    finishReason: cut ? "stop" : finishReason,
  };
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
  const k = r.topLogprobs ?? 0;
  if (!(Number.isInteger(k) && k >= 0 && k <= MAX_TOP_LOGPROBS))
    throw new ValidationError(`topLogprobs must be an integer from 0 to ${MAX_TOP_LOGPROBS}, got ${k}`, ["requests", index, "topLogprobs"]);
  r.prompt.forEach((id, j) => {
    if (!(Number.isInteger(id) && id >= 0 && id < config.vocab_size))
      throw new ValidationError(`token id ${id} is outside the vocabulary`, ["requests", index, "prompt", j]);
  });
}
