/**
 * Generation on WebGPU. The default path is KV-cached (src/gpu/decode.ts): the batch's prompts are
 * prefilled once, then each step feeds one token per live sequence and attends over the cache. Only the
 * last position's logits of the live rows come back per step; sampling runs on the host with the same
 * sampler, per-request seed stream and vocab limit (the tokenizer's ids only) as the CPU engine, so equal
 * logits give equal tokens. A sequence
 * ends on a stop id, at its limit, or on the step whose token completes a stop string in its text.
 * `kvCache: false` keeps the older path that recomputes the whole (left-padded) prefix every step: the
 * baseline of bench/generate.ts and a cross-check in the tests.
 * A LoRA adapter is applied unmerged on both paths (src/gpu/projection.ts, docs/lora.md); a new adapter
 * array uploads the adapter alone, never the base.
 */
import { GpuContext } from "./context.ts";
import { GpuDecoder, leftPaddedBatch, maxDecoderBatch } from "./decode.ts";
import type { GpuDeviceOptions } from "./device.ts";
import { GpuModel } from "./model.ts";
import type { WeightFormat } from "./kernels/weights.ts";
import type { ModelConfig } from "../model/config.ts";
import { sampledTokenLogProbs, sampleToken } from "../model/generate.ts";
import { Rng } from "../model/init.ts";
import { flattenParams, type ModelParams } from "../model/params.ts";
import type { LoraWeights } from "../model/lora.ts";
import { byteTokenizer } from "../model/tokenizer.ts";
import type { Tokenizer } from "../model/tokenizer-api.ts";
import { ValidationError } from "../types/errors.ts";
import {
  finishGeneration,
  tokenizerVocabLimit,
  validateRequest,
  type FinishReason,
  type Generation,
  type GenerationEngine,
  type GenerationRequest,
  type TokenAlternative,
} from "../model/generation.ts";
import { IncrementalDecoder } from "../model/detokenize.ts";

/** One sequence being generated: its request, its sampler, what it has produced. */
class Live {
  readonly tokens: number[] = [];
  readonly logprobs: number[] = [];
  /** The likeliest ids at each token, when the request asks for them. */
  readonly alternatives: TokenAlternative[][] | undefined;
  readonly limit: number;
  readonly stop: Set<number>;
  readonly rng: Rng;
  /** Ids at or above this are never sampled (the tokenizer has no text for them). */
  private readonly vocabLimit: number | undefined;
  finish: FinishReason | null = null;
  /** The text so far, when stop strings can end the sequence before its limit. */
  private readonly text: IncrementalDecoder | null;
  private readonly needles: string[];
  private readonly longest: number;

  constructor(
    readonly req: GenerationRequest,
    config: ModelConfig,
    private readonly tokenizer: Tokenizer,
  ) {
    this.limit = Math.min(req.maxTokens, config.max_seq_len - req.prompt.length);
    this.stop = new Set(req.stopTokenIds ?? tokenizer.eosTokenIds);
    this.rng = new Rng(req.seed ?? 0);
    this.alternatives = (req.topLogprobs ?? 0) > 0 ? [] : undefined;
    this.vocabLimit = tokenizerVocabLimit(config, tokenizer);
    this.needles = (req.stop ?? []).filter((n) => n.length > 0);
    this.longest = Math.max(0, ...this.needles.map((n) => n.length));
    this.text = this.needles.length > 0 ? new IncrementalDecoder(tokenizer) : null;
    if (this.limit <= 0) this.finish = "length";
  }

  /** True once a stop string is in the text: decoding on would only make tokens that get cut. */
  private stopStringSeen(token: number): boolean {
    if (this.text === null) return false;
    const delta = this.text.push(token);
    if (delta === "") return false;
    const tail = this.text.text.slice(Math.max(0, this.text.text.length - delta.length - this.longest + 1));
    return this.needles.some((n) => tail.includes(n));
  }

  /** Samples the next token from this sequence's logits row and updates its state. */
  take(row: Float32Array): void {
    const token = sampleToken(row, { temperature: this.req.temperature, topP: this.req.topP, vocabLimit: this.vocabLimit }, this.rng);
    this.tokens.push(token);
    const scored = sampledTokenLogProbs(row, token, this.req.topLogprobs ?? 0, this.vocabLimit);
    this.logprobs.push(scored.logprob);
    if (scored.top) this.alternatives?.push(scored.top);
    if (this.stop.has(token) || this.stopStringSeen(token)) this.finish = "stop";
    else if (this.tokens.length >= this.limit) this.finish = "length";
  }

  result(): Generation {
    return finishGeneration(this.tokens, this.logprobs, this.finish ?? "length", this.req.stop, this.tokenizer, this.alternatives);
  }
}

export interface GpuGenerationOptions {
  /** Decode over a KV cache [true]; false recomputes the whole prefix every step. */
  kvCache?: boolean;
  /** Most sequences decoded together [as many as the device's buffer limits allow]; more run in turns. */
  maxBatch?: number;
  /** Weight matrices on the device in float32 [default], or in 16 bits (half the memory; src/gpu/kernels/weights.ts). */
  weightFormat?: WeightFormat;
}

export class GpuGenerationEngine implements GenerationEngine {
  readonly backend = "webgpu" as const;
  readonly kvCache: boolean;
  readonly maxBatch: number;
  readonly weightFormat: WeightFormat;
  private model: GpuModel | null = null;
  private modelConfig: string | null = null;
  private uploaded: ModelParams | null = null;
  /** The adapter tensors on the device (their array: re-uploaded when another comes), or null for none. */
  private uploadedAdapter: LoraWeights["params"] | null = null;

  /** `ctx` may be shared with a GPU trainer: generations run through `ctx.exclusive`. */
  constructor(
    readonly ctx: GpuContext,
    options: GpuGenerationOptions = {},
  ) {
    this.kvCache = options.kvCache ?? true;
    this.maxBatch = options.maxBatch ?? Infinity;
    this.weightFormat = options.weightFormat ?? "f32";
    if (!(this.maxBatch >= 1)) throw new ValidationError(`maxBatch must be at least 1, got ${this.maxBatch}`, ["maxBatch"]);
  }

  static async create(options?: GpuDeviceOptions & GpuGenerationOptions): Promise<GpuGenerationEngine> {
    return new GpuGenerationEngine(await GpuContext.create(options), options);
  }

  /** The model for `config` with `params` and `adapter` on the device (each uploaded again only when a new
   * array comes). */
  private modelFor(config: ModelConfig, params: ModelParams, adapter: LoraWeights | undefined): GpuModel {
    const key = JSON.stringify(config);
    if (this.model === null || this.modelConfig !== key) {
      this.model?.destroy();
      this.model = null;
      this.uploadedAdapter = null;
      this.model = new GpuModel(this.ctx, config, flattenParams(config, params), false, { weightFormat: this.weightFormat });
      this.modelConfig = key;
    } else if (this.uploaded !== params) this.model.writeFlat(this.model.params, flattenParams(config, params));
    this.uploaded = params;
    const model = this.model;
    if (adapter === undefined) {
      if (model.adapter !== null) model.setAdapter(null);
      this.uploadedAdapter = null;
    } else if (this.uploadedAdapter !== adapter.params || model.adapter === null || !model.adapter.fits(adapter)) {
      this.uploadedAdapter = null; // a failed upload must not count as done
      model.setAdapter(adapter);
      this.uploadedAdapter = adapter.params;
    }
    return model;
  }

  generate(
    config: ModelConfig,
    params: ModelParams,
    requests: readonly GenerationRequest[],
    tokenizer: Tokenizer = byteTokenizer,
    adapter?: LoraWeights,
  ): Promise<Generation[]> {
    requests.forEach((r, i) => validateRequest(config, r, i));
    return this.ctx.exclusive(async () => {
      const model = this.modelFor(config, params, adapter);
      const live = requests.map((req) => new Live(req, config, tokenizer));
      if (this.kvCache) await this.runCached(model, live);
      else await this.runUncached(model, live);
      return live.map((s) => s.result());
    });
  }

  /** Prefill + cached decode steps, in batches as large as the device's buffer limits allow. */
  private async runCached(model: GpuModel, live: Live[]): Promise<void> {
    const V = model.config.vocab_size;
    const todo = live.filter((s) => s.finish === null);
    while (todo.length > 0) {
      const T = Math.max(...todo.map((s) => s.req.prompt.length));
      const steps = Math.max(...todo.map((s) => s.limit)) - 1;
      const fit = Math.min(this.maxBatch, maxDecoderBatch(this.ctx, model.config, T, T + steps));
      let group = todo.splice(0, fit);
      const decoder = new GpuDecoder(
        model,
        group.map((s) => s.req.prompt),
        T + steps,
      );
      try {
        let logits = await decoder.prefill();
        for (;;) {
          group.forEach((s, b) => {
            if (s.finish === null) s.take(logits.subarray(b * V, (b + 1) * V));
          });
          const alive = group.flatMap((s, b) => (s.finish === null ? [b] : []));
          if (alive.length === 0) break;
          // Once half the sequences have ended, drop them from the cache instead of computing them on.
          if (alive.length <= group.length / 2) {
            decoder.keep(alive);
            group = alive.map((b) => group[b]);
          }
          logits = await decoder.step(group.map((s) => (s.finish === null ? s.tokens[s.tokens.length - 1] : null)));
        }
      } finally {
        decoder.destroy();
      }
    }
  }

  /** Every step runs the live sequences' whole (left-padded) prefix through the model. */
  private async runUncached(model: GpuModel, live: Live[]): Promise<void> {
    const V = model.config.vocab_size;
    for (;;) {
      const active = live.filter((s) => s.finish === null);
      if (active.length === 0) break;
      const { shape, inputs } = leftPaddedBatch(active.map((s) => [...s.req.prompt, ...s.tokens]));
      const ws = model.forward(shape, inputs);
      const logits = await this.ctx.read(ws.logits, shape.B * V);
      active.forEach((s, b) => s.take(logits.subarray(b * V, (b + 1) * V)));
    }
  }

  /** Bytes of the base's weights on the device (0 before the first generation). */
  get weightBytes(): number {
    return this.model?.paramBytes ?? 0;
  }

  /** Bytes of the adapter's tensors on the device (0 without one). */
  get adapterBytes(): number {
    return this.model?.adapter?.tensors.paramBytes ?? 0;
  }

  destroy(): void {
    this.model?.destroy();
    this.model = null;
  }
}
