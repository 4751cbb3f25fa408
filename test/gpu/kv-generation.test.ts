/**
 * KV-cached GPU generation against the CPU engine for the same weights: greedy tokens equal token for
 * token in one batch of prompts of different lengths, with rows that stop early (stop ids, stop strings)
 * and a row capped by max_seq_len; the uncached GPU path agrees too; seeded sampling (temperature, top-p)
 * is reproducible and draws the CPU engine's tokens. Skips with a printed reason without an adapter.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { GpuDecoder } from "../../src/gpu/decode.ts";
import { initParams, presetConfig } from "../../src/model/index.ts";
import type { Generation, GenerationRequest } from "../../src/model/generation.ts";
import { GpuGenerationEngine } from "../../src/gpu/generation.ts";
import { cpuGenerationEngine } from "../../src/cpu/generation.ts";
import { noGpu } from "./gpu-env.ts";

const config = { ...presetConfig("tiny"), max_seq_len: 40 };
const params = initParams(config, 11);

function expectSame(gpu: Generation[], cpu: Generation[]): void {
  expect(gpu.map((g) => g.tokenIds)).toEqual(cpu.map((g) => g.tokenIds));
  expect(gpu.map((g) => g.finishReason)).toEqual(cpu.map((g) => g.finishReason));
  expect(gpu.map((g) => g.text)).toEqual(cpu.map((g) => g.text));
  gpu.forEach((g, i) => g.logprobs.forEach((lp, j) => expect(lp).toBeCloseTo(cpu[i].logprobs[j], 3)));
}

describe.skipIf(noGpu)("KV-cached GPU generation", { timeout: 300_000 }, () => {
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

  it("greedy batch with different prompt lengths, early stops and a max_seq_len cap equals the CPU engine", async () => {
    const prompts = [
      [256, 260, 104, 105, 257, 261],
      [72],
      Array.from({ length: 17 }, (_, j) => 40 + j),
      Array.from({ length: 36 }, (_, j) => 97 + (j % 26)),
    ];
    const free = await cpuGenerationEngine.generate(
      config,
      params,
      prompts.map((prompt) => ({ prompt, maxTokens: 8, temperature: 0, stopTokenIds: [] })),
    );
    // A token that some rows produce mid-way ends them early; the 36-token prompt is capped at 4 new tokens.
    const stopId = free[0].tokenIds[3];
    const requests: GenerationRequest[] = prompts.map((prompt, i) => ({
      prompt,
      maxTokens: i === 1 ? 5 : 8,
      temperature: 0,
      stopTokenIds: [stopId],
      stop: i === 2 ? [free[2].text.slice(2, 3) || "\u0000"] : [],
    }));
    const cpu = await cpuGenerationEngine.generate(config, params, requests);
    expect(cpu[0].finishReason).toBe("stop");
    expect(cpu[3].tokenIds.length).toBeLessThanOrEqual(4);
    expect(new Set(cpu.map((g) => g.tokenIds.length)).size).toBeGreaterThan(1); // rows really end at different steps
    const keep = vi.spyOn(GpuDecoder.prototype, "keep");
    expectSame(await cached.generate(config, params, requests), cpu);
    expect(keep).toHaveBeenCalled(); // ended rows were dropped from the cache on the way
    keep.mockRestore();
    expectSame(await uncached.generate(config, params, requests), cpu);
    // in turns of at most two sequences per decoder: the same answers
    const inTwos = new GpuGenerationEngine(cached.ctx, { maxBatch: 2 });
    expectSame(await inTwos.generate(config, params, requests), cpu);
    inTwos.destroy();
  });

  it("a stop string ends the sequence on the step that completes it (no decoding on to max_tokens)", async () => {
    const prompt = [256, 260, 104, 105, 257, 261];
    const sampling = { prompt, maxTokens: 30, temperature: 1, seed: 5, stopTokenIds: [] };
    const [free] = await cpuGenerationEngine.generate(config, params, [sampling]);
    const needle = free.text.slice(3, 5);
    expect(needle.length).toBe(2);
    const request: GenerationRequest = { ...sampling, stop: [needle] };
    const [cpu] = await cpuGenerationEngine.generate(config, params, [request]);
    expect(cpu.finishReason).toBe("stop");
    expect(cpu.tokenIds.length).toBeLessThan(free.tokenIds.length);
    const step = vi.spyOn(GpuDecoder.prototype, "step");
    expectSame(await cached.generate(config, params, [request]), [cpu]);
    // one step per token after the first: none past the one that completed the stop string
    expect(step).toHaveBeenCalledTimes(cpu.tokenIds.length - 1);
    step.mockRestore();
  });

  it("seeded sampling with temperature and top-p is reproducible and draws the CPU engine's tokens", async () => {
    const prompts = [
      [256, 260, 50, 43, 51, 61, 63, 257, 261],
      [65, 66],
      [200, 201, 202, 203, 204],
    ];
    const requests = (seed: number): GenerationRequest[] =>
      prompts.map((prompt, i) => ({ prompt, maxTokens: 10, temperature: 0.8, topP: 0.9, seed: seed + i, stopTokenIds: [] }));
    const a = await cached.generate(config, params, requests(3));
    const b = await cached.generate(config, params, requests(3));
    expect(b).toEqual(a);
    expectSame(a, await cpuGenerationEngine.generate(config, params, requests(3)));
    const other = await cached.generate(config, params, requests(4));
    expect(other.map((g) => g.tokenIds)).not.toEqual(a.map((g) => g.tokenIds));
  });
});
