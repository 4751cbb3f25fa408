/**
 * The WebGPU engines (KV-cached, uncached, behind the batching engine) never sample an id the tokenizer
 * has no text for, on a model whose logits make the preset's padding id 263 by far the most likely;
 * greedy and sampled, with the CPU engine's tokens. Skips with a printed reason without an adapter.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generate } from "../../src/model/generate.ts";
import { byteTokenizer, TOKENIZER_VOCAB_SIZE } from "../../src/model/tokenizer.ts";
import type { GenerationRequest } from "../../src/model/generation.ts";
import { BatchingEngine } from "../../src/engine/index.ts";
import { GpuGenerationEngine } from "../../src/gpu/generation.ts";
import { referenceGenerationEngine } from "../../src/cpu/generation.ts";
import { favouredModel } from "../model/favoured-token.ts";
import { noGpu } from "./gpu-env.ts";

const padded = TOKENIZER_VOCAB_SIZE - 1;
const { config, params } = favouredModel(padded);
const requests: GenerationRequest[] = [
  { prompt: [257, 72, 105, 10], maxTokens: 8, temperature: 0, stopTokenIds: [] },
  { prompt: [72], maxTokens: 8, temperature: 1, seed: 3, stopTokenIds: [] },
  { prompt: [257, 97, 98], maxTokens: 8, temperature: 2, topP: 0.9, seed: 4, stopTokenIds: [] },
];

describe.skipIf(noGpu)("WebGPU generation on a padded vocab", { timeout: 300_000 }, () => {
  let cached: GpuGenerationEngine;
  let uncached: GpuGenerationEngine;
  beforeAll(async () => {
    cached = await GpuGenerationEngine.create();
    uncached = new GpuGenerationEngine(cached.ctx, { kvCache: false });
  });
  afterAll(() => {
    cached?.destroy();
    uncached?.destroy();
    cached?.ctx.destroy();
  });

  it("the padding id is what an unrestricted sampler picks", () => {
    expect(generate(config, params, requests[0].prompt, { maxTokens: 3, temperature: 0, stop: [] }).tokens).toEqual([
      padded,
      padded,
      padded,
    ]);
  });

  it("samples only the tokenizer's ids, cached, uncached and batched, greedy and sampled, as the CPU engine does", async () => {
    const cpu = await referenceGenerationEngine.generate(config, params, requests, byteTokenizer);
    const batching = new BatchingEngine(cached);
    for (const engine of [cached, uncached, batching]) {
      const out = await engine.generate(config, params, requests, byteTokenizer);
      for (const g of out) {
        expect(g.tokenIds).toHaveLength(8);
        expect(g.tokenIds.every((t) => t < byteTokenizer.vocabSize)).toBe(true);
      }
      expect(out[0].tokenIds).toEqual(cpu[0].tokenIds);
      out[0].logprobs.forEach((lp, j) => expect(lp).toBeCloseTo(cpu[0].logprobs[j], 3));
    }
  });
});
