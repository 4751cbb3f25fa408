/**
 * The CPU generation engines: `src/model/generate.ts` (KV cache) per request, on the Wasm SIMD kernels
 * over a worker pool of the engine's own by default (`ops: "reference"`: plain TS). They keep the
 * generation contract of src/model/generation.ts (stop strings cut after decoding to the limit).
 */
import { CpuBackend, type CpuEngineOptions } from "./backend.ts";
import type { ModelConfig } from "../model/config.ts";
import { generate } from "../model/generate.ts";
import {
  finishGeneration,
  tokenizerVocabLimit,
  validateRequest,
  type Generation,
  type GenerationEngine,
  type GenerationRequest,
} from "../model/generation.ts";
import type { ModelOps } from "../model/model-ops.ts";
import { paramViews, type ModelParams, type ParamViews } from "../model/params.ts";
import { loraState, type LoraWeights } from "../model/lora.ts";
import { byteTokenizer } from "../model/tokenizer.ts";
import type { Tokenizer } from "../model/tokenizer-api.ts";

/**
 * The CPU engine: one KV-cached sequence at a time. On the Wasm ops the weights stay resident in the
 * engine's Wasm memory: copied in when the engine first sees a weights object (or adapter), re-copied
 * only when it is handed a different one (a new policy version: ModelPolicy publishes copies). The engine
 * recognises weights by identity, so a caller must not change a buffer in place between calls.
 */
export class CpuGenerationEngine implements GenerationEngine {
  readonly backend = "cpu" as const;
  private readonly cpu: CpuBackend;
  /** The resident base and adapter: what they were made from, their views, where the adapter starts. */
  private base: { config: ModelConfig; params: ModelParams; views: ParamViews; adapterMark: number } | null = null;
  private adapter: { from: LoraWeights; weights: LoraWeights } | null = null;

  constructor(options: CpuEngineOptions = {}) {
    this.cpu = new CpuBackend(options);
  }

  /** "wasm" or "reference". */
  get opsChoice(): "wasm" | "reference" {
    return this.cpu.choice;
  }

  /** Ends the Wasm engine's worker threads; the engine cannot generate afterwards. */
  close(): void {
    this.cpu.close();
  }

  async generate(
    config: ModelConfig,
    params: ModelParams,
    requests: readonly GenerationRequest[],
    tokenizer: Tokenizer = byteTokenizer,
    adapter?: LoraWeights,
  ): Promise<Generation[]> {
    requests.forEach((r, i) => validateRequest(config, r, i));
    const K = await this.cpu.get();
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
        topLogprobs: r.topLogprobs,
        vocabLimit,
        lora,
        ops: K,
      });
      return finishGeneration(out.tokens, out.logprobs, out.finishReason, r.stop, tokenizer, out.alternatives);
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
