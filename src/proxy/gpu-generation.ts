/**
 * Generation on WebGPU with the GPU model's forward pass (src/gpu/model.ts): every step runs the batch
 * of live sequences (left-padded, masked) through the model, reads back only the last position's
 * logits of each row, and samples on the host with the same sampler and per-request seed stream as the
 * CPU engine, so equal logits give equal tokens. There is no KV cache yet: each step recomputes the
 * whole prefix (quadratic in length, fine for the short answers agents ask the policy for).
 */
import { GpuContext } from "../gpu/context.ts";
import type { GpuDeviceOptions } from "../gpu/device.ts";
import { GpuModel } from "../gpu/model.ts";
import type { ModelConfig } from "../model/config.ts";
import { sampleToken } from "../model/generate.ts";
import { Rng } from "../model/init.ts";
import { EOS_ID } from "../model/tokenizer.ts";
import { finishGeneration, validateRequest, type FinishReason, type Generation, type GenerationEngine, type GenerationRequest } from "./generation.ts";

/** log softmax(logits)[id], computed stably. */
export function logProbOf(logits: ArrayLike<number>, id: number): number {
  let max = -Infinity;
  for (let j = 0; j < logits.length; j++) if (logits[j] > max) max = logits[j];
  let sum = 0;
  for (let j = 0; j < logits.length; j++) sum += Math.exp(logits[j] - max);
  return logits[id] - max - Math.log(sum);
}

interface Live {
  req: GenerationRequest;
  ids: number[];
  tokens: number[];
  logprobs: number[];
  limit: number;
  stop: Set<number>;
  rng: Rng;
  finish: FinishReason | null;
}

export class GpuGenerationEngine implements GenerationEngine {
  readonly backend = "webgpu" as const;
  private model: GpuModel | null = null;
  private modelConfig: string | null = null;
  private uploaded: Float32Array | null = null;

  constructor(readonly ctx: GpuContext) {}

  static async create(options?: GpuDeviceOptions): Promise<GpuGenerationEngine> {
    return new GpuGenerationEngine(await GpuContext.create(options));
  }

  /** The model for `config` with `params` on the device (uploaded again only when a new array comes). */
  private modelFor(config: ModelConfig, params: Float32Array): GpuModel {
    const key = JSON.stringify(config);
    if (this.model === null || this.modelConfig !== key) {
      this.model?.destroy();
      this.model = new GpuModel(this.ctx, config, params);
      this.modelConfig = key;
    } else if (this.uploaded !== params) this.model.writeFlat(this.model.params, params);
    this.uploaded = params;
    return this.model;
  }

  async generate(config: ModelConfig, params: Float32Array, requests: readonly GenerationRequest[]): Promise<Generation[]> {
    requests.forEach((r, i) => validateRequest(config, r, i));
    const model = this.modelFor(config, params);
    const V = config.vocab_size;
    const live: Live[] = requests.map((req) => ({
      req, ids: [...req.prompt], tokens: [], logprobs: [],
      limit: Math.min(req.maxTokens, config.max_seq_len - req.prompt.length),
      stop: new Set(req.stopTokenIds ?? [EOS_ID]), rng: new Rng(req.seed ?? 0), finish: null,
    }));
    for (const s of live) if (s.limit <= 0) s.finish = "length";
    for (;;) {
      const active = live.filter((s) => s.finish === null);
      if (active.length === 0) break;
      const B = active.length;
      const T = Math.max(...active.map((s) => s.ids.length));
      const ids = new Uint32Array(B * T), mask = new Uint32Array(B * T), positions = new Uint32Array(B * T);
      const predictRows = new Uint32Array(B), targets = new Uint32Array(B);
      active.forEach((s, b) => {
        const pad = T - s.ids.length;
        s.ids.forEach((id, j) => {
          ids[b * T + pad + j] = id;
          mask[b * T + pad + j] = 1;
          positions[b * T + pad + j] = j;
        });
        predictRows[b] = b * T + T - 1;
      });
      const ws = model.forward({ B, T, R: 1 }, { ids, mask, positions, predictRows, targets });
      const logits = await this.ctx.read(ws.logits, B * V);
      active.forEach((s, b) => {
        const row = logits.subarray(b * V, (b + 1) * V);
        const token = sampleToken(row, { temperature: s.req.temperature, topP: s.req.topP }, s.rng);
        s.tokens.push(token);
        s.logprobs.push(logProbOf(row, token));
        s.ids.push(token);
        if (s.stop.has(token)) s.finish = "stop";
        else if (s.tokens.length >= s.limit) s.finish = "length";
      });
    }
    return live.map((s) => finishGeneration(s.tokens, s.logprobs, s.finish ?? "length", s.req.stop));
  }

  destroy(): void {
    this.model?.destroy();
    this.model = null;
  }
}
