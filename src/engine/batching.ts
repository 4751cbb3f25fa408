/**
 * Joins concurrent generation calls into one batch: the policy server gets one call per HTTP request,
 * and agents run many requests at once, so on the GPU the sequences of every call waiting when the
 * engine comes free decode together (one prefill, one step per token for all). A call's tokens do not
 * depend on what it is batched with (per-request seeds; each row's arithmetic is its own), so joining
 * changes only the speed. Calls for other weights (or another adapter version) than the first waiting one
 * wait for a later batch.
 */
import type { ModelConfig } from "../model/config.ts";
import type { ModelParams } from "../model/params.ts";
import type { LoraWeights } from "../model/lora.ts";
import type { Tokenizer } from "../model/tokenizer-api.ts";
import { validateRequest, type Generation, type GenerationEngine, type GenerationRequest } from "../model/generation.ts";

interface Waiting {
  config: ModelConfig;
  params: ModelParams;
  tokenizer: Tokenizer | undefined;
  adapter: LoraWeights | undefined;
  requests: readonly GenerationRequest[];
  resolve: (g: Generation[]) => void;
  reject: (e: unknown) => void;
}

export class BatchingEngine implements GenerationEngine {
  readonly backend: GenerationEngine["backend"];
  private readonly waiting: Waiting[] = [];
  private running = false;

  /** `maxSequences`: most sequences per batch (a call larger than that still runs, alone). */
  constructor(
    readonly inner: GenerationEngine,
    readonly maxSequences = 64,
  ) {
    this.backend = inner.backend;
  }

  generate(
    config: ModelConfig,
    params: ModelParams,
    requests: readonly GenerationRequest[],
    tokenizer?: Tokenizer,
    adapter?: LoraWeights,
  ): Promise<Generation[]> {
    // bad input fails its own call here, never a batch it would have joined
    requests.forEach((r, i) => validateRequest(config, r, i));
    return new Promise((resolve, reject) => {
      this.waiting.push({ config, params, tokenizer, adapter, requests, resolve, reject });
      void this.drain();
    });
  }

  private async drain(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      while (this.waiting.length > 0) {
        // let the calls made in this same turn of the event loop join the first batch
        await new Promise((r) => setTimeout(r, 0));
        const batch = this.takeBatch();
        try {
          const out = await this.inner.generate(
            batch[0].config,
            batch[0].params,
            batch.flatMap((w) => w.requests),
            batch[0].tokenizer,
            batch[0].adapter,
          );
          let at = 0;
          for (const w of batch) {
            w.resolve(out.slice(at, at + w.requests.length));
            at += w.requests.length;
          }
        } catch (e) {
          for (const w of batch) w.reject(e);
        }
      }
    } finally {
      this.running = false;
    }
  }

  /** The first waiting call and every later one for the same weights that fits, in arrival order. */
  private takeBatch(): Waiting[] {
    const head = this.waiting[0];
    const batch: Waiting[] = [];
    let sequences = 0;
    for (let i = 0; i < this.waiting.length; ) {
      const w = this.waiting[i];
      const fits = batch.length === 0 || sequences + w.requests.length <= this.maxSequences;
      if (w.config === head.config && w.params === head.params && w.tokenizer === head.tokenizer && w.adapter === head.adapter && fits) {
        batch.push(w);
        sequences += w.requests.length;
        this.waiting.splice(i, 1);
      } else i++;
    }
    return batch;
  }
}
