/**
 * Greedy generation on the GPU equals greedy generation on the CPU reference for the same weights
 * (prompts of different lengths in one batch, so left padding is exercised), and the log-probs of the
 * generated tokens agree. Skips with a printed reason where there is no WebGPU adapter.
 */
import { afterAll, describe, expect, it } from "vitest";
import { heldOutTasks } from "../../examples/calc/tasks.ts";
import { promptIds } from "../../examples/calc/sft.ts";
import { initParams, loadCheckpoint, presetConfig } from "../../src/model/index.ts";
import type { GenerationRequest } from "../../src/model/generation.ts";
import { GpuGenerationEngine } from "../../src/gpu/generation.ts";
import { cpuGenerationEngine } from "../../src/cpu/generation.ts";
import { noGpu } from "./gpu-env.ts";

const config = { ...presetConfig("tiny"), max_seq_len: 64 };

describe.skipIf(noGpu)("GPU generation", () => {
  let engine: GpuGenerationEngine | null = null;
  afterAll(() => engine?.ctx.destroy());

  it("greedy tokens and their log-probs match the CPU reference", async () => {
    engine = await GpuGenerationEngine.create();
    const params = initParams(config, 7);
    const requests: GenerationRequest[] = [
      { prompt: [256, 260, 104, 105, 257, 261], maxTokens: 10, temperature: 0, stopTokenIds: [] },
      { prompt: [256, 260, 50, 43, 51, 61, 63, 257, 261], maxTokens: 10, temperature: 0, stopTokenIds: [] },
      { prompt: [72], maxTokens: 6, temperature: 0, stopTokenIds: [] },
    ];
    const cpu = await cpuGenerationEngine.generate(config, params, requests);
    const gpu = await engine.generate(config, params, requests);
    expect(gpu.map((g) => g.tokenIds)).toEqual(cpu.map((g) => g.tokenIds));
    expect(gpu.map((g) => g.finishReason)).toEqual(cpu.map((g) => g.finishReason));
    gpu.forEach((g, i) => g.logprobs.forEach((lp, j) => expect(lp).toBeCloseTo(cpu[i].logprobs[j], 3)));

    // the alternatives asked for: the same distribution (ids can swap where two logits are within rounding)
    const withTop = requests.map((r) => ({ ...r, topLogprobs: 5 }));
    const cpuTop = await cpuGenerationEngine.generate(config, params, withTop);
    const gpuTop = await engine.generate(config, params, withTop);
    gpuTop.forEach((g, i) => {
      expect(g.tokenIds).toEqual(cpu[i].tokenIds);
      expect(g.topLogprobs).toHaveLength(g.tokenIds.length);
      g.topLogprobs!.forEach((alts, j) => {
        expect(alts[0].id).toBe(g.tokenIds[j]);
        alts.forEach((a, m) => expect(a.logprob).toBeCloseTo(cpuTop[i].topLogprobs![j][m].logprob, 3));
      });
    });

    // new weights are uploaded when a new array comes
    const other = initParams(config, 8);
    const cpu2 = await cpuGenerationEngine.generate(config, other, requests.slice(0, 1));
    const gpu2 = await engine.generate(config, other, requests.slice(0, 1));
    expect(gpu2[0].tokenIds).toEqual(cpu2[0].tokenIds);
    gpu2[0].logprobs.forEach((lp, j) => expect(lp).toBeCloseTo(cpu2[0].logprobs[j], 3));
    expect(gpu2[0].logprobs[0]).not.toBeCloseTo(gpu[0].logprobs[0], 3);
  }, 300_000);

  it("greedy answers of the trained calc checkpoint match the CPU reference", async () => {
    engine ??= await GpuGenerationEngine.create();
    const { config: c, params } = await loadCheckpoint("examples/calc/checkpoint-sft", undefined, { optimizer: false });
    const requests = heldOutTasks(12).map((t) => ({ prompt: promptIds(t), maxTokens: 6, temperature: 0 }));
    const cpu = await cpuGenerationEngine.generate(c, params, requests);
    const gpu = await engine.generate(c, params, requests);
    expect(new Set(cpu.map((g) => g.text)).size).toBeGreaterThan(3); // real, varied answers
    expect(gpu.map((g) => g.tokenIds)).toEqual(cpu.map((g) => g.tokenIds));
  }, 300_000);
});
