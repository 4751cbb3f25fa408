/**
 * The WebGPU engine on the Hugging Face architectures: the q/k/v-bias kernel against its reference on
 * random odd shapes, and for each golden checkpoint (test/fixtures/hf: Llama with llama3 RoPE, sharded
 * GQA Llama, Qwen2 with biases, Qwen3 with qk-norm and head_dim != d/heads) the GPU's greedy tokens and
 * log-probs equal the CPU engine's, and the GPU's logits equal the independent golden ones.
 */
import { readFileSync } from "node:fs";
import { afterAll, describe, expect, it } from "vitest";
import { GpuContext } from "../../src/gpu/context.ts";
import { leftPaddedBatch } from "../../src/gpu/decode.ts";
import { addBias } from "../../src/gpu/kernels/bias.ts";
import { packWeights, roundWeights } from "../../src/gpu/kernels/weights.ts";
import { paramLayout } from "../../src/model/config.ts";
import { GpuModel } from "../../src/gpu/model.ts";
import { loadPretrained } from "../../src/model/hf/index.ts";
import { Rng } from "../../src/model/init.ts";
import { flattenParams } from "../../src/model/params.ts";
import { addBiasInPlace } from "../../src/model/reference/ops.ts";
import type { GenerationRequest } from "../../src/model/generation.ts";
import { cpuGenerationEngine } from "../../src/cpu/generation.ts";
import { GpuGenerationEngine } from "../../src/gpu/generation.ts";
import { maxRelError, noGpu, randn } from "./gpu-env.ts";

const CASES = ["llama-tied-llama3", "llama-untied-gqa-sharded", "qwen2-bias-tied", "qwen3-qknorm-headdim"];

describe.skipIf(noGpu)("WebGPU engine: Hugging Face architectures", () => {
  let engine: GpuGenerationEngine | null = null;
  afterAll(() => engine?.ctx.destroy());

  it("adds biases like the reference on random odd shapes", async () => {
    engine = await GpuGenerationEngine.create();
    const ctx: GpuContext = engine.ctx;
    const rng = new Rng(3);
    for (const [rows, cols] of [
      [1, 1],
      [7, 13],
      [33, 130],
    ]) {
      const x = randn(rng, rows * cols);
      const b = randn(rng, cols);
      const xb = ctx.upload(x);
      const bb = ctx.upload(b);
      addBias(ctx, xb, bb, rows, cols);
      const want = x.slice();
      addBiasInPlace(want, b);
      expect(maxRelError(await ctx.read(xb, rows * cols), want)).toBeLessThan(1e-6);
      xb.destroy();
      bb.destroy();
    }
  });

  it.each(CASES)(
    "%s: GPU logits match the golden ones, greedy tokens and log-probs match the CPU engine",
    async (name) => {
      engine ??= await GpuGenerationEngine.create();
      const dir = `test/fixtures/hf/${name}`;
      const model = await loadPretrained(dir);
      const golden = JSON.parse(readFileSync(`${dir}/golden.json`, "utf8")) as { ids: number[]; logits: number[][] };
      // logits of the last position of the golden sequence through the GPU model's forward
      const gpuModel = new GpuModel(engine.ctx, model.config, flattenParams(model.config, model.weights), false);
      try {
        const { shape, inputs } = leftPaddedBatch([golden.ids]);
        const ws = gpuModel.forward(shape, inputs);
        const last = await engine.ctx.read(ws.logits, model.config.vocab_size);
        expect(maxRelError(last, golden.logits[golden.ids.length - 1])).toBeLessThan(1e-4);
      } finally {
        gpuModel.destroy();
      }
      const requests: GenerationRequest[] = [
        { prompt: golden.ids.slice(0, 5), maxTokens: 8, temperature: 0, stopTokenIds: [] },
        { prompt: golden.ids.slice(0, 9), maxTokens: 6, temperature: 0, stopTokenIds: [] },
        { prompt: [golden.ids[0]], maxTokens: 4, temperature: 0.9, topP: 0.9, seed: 5, stopTokenIds: [] },
      ];
      const cpu = await cpuGenerationEngine.generate(model.config, model.weights, requests);
      const gpu = await engine.generate(model.config, model.weights, requests);
      expect(gpu.map((g) => g.tokenIds)).toEqual(cpu.map((g) => g.tokenIds));
      gpu.forEach((g, i) => g.logprobs.forEach((lp, j) => expect(lp).toBeCloseTo(cpu[i].logprobs[j], 3)));
    },
    300_000,
  );
});

describe.skipIf(noGpu)("WebGPU engine: 16-bit weights", () => {
  it.each(["bf16", "f16"] as const)(
    "%s matrices: the CPU engine's tokens on the same rounded weights, half the bytes",
    async (format) => {
      const engine = await GpuGenerationEngine.create({ weightFormat: format });
      try {
        for (const name of ["qwen3-qknorm-headdim", "llama-tied-llama3"]) {
          const model = await loadPretrained(`test/fixtures/hf/${name}`);
          // The CPU twin: matrices rounded to the 16-bit format, vectors (norms, biases) kept.
          const rounded = Object.fromEntries(
            paramLayout(model.config).map((s) => [
              s.name,
              s.shape.length === 2 ? roundWeights(model.weights[s.name], format) : model.weights[s.name],
            ]),
          );
          const golden = JSON.parse(readFileSync(`test/fixtures/hf/${name}/golden.json`, "utf8")) as { ids: number[] };
          const requests: GenerationRequest[] = [
            { prompt: golden.ids.slice(0, 6), maxTokens: 8, temperature: 0, stopTokenIds: [] },
            { prompt: golden.ids.slice(0, 3), maxTokens: 5, temperature: 0, stopTokenIds: [] },
          ];
          const gpu = await engine.generate(model.config, model.weights, requests);
          const cpu = await cpuGenerationEngine.generate(model.config, rounded, requests);
          expect(
            gpu.map((g) => g.tokenIds),
            name,
          ).toEqual(cpu.map((g) => g.tokenIds));
          gpu.forEach((g, i) => g.logprobs.forEach((lp, j) => expect(lp).toBeCloseTo(cpu[i].logprobs[j], 3)));
          // 2 bytes per matrix element (4 for the few vector elements)
          const elements = paramLayout(model.config).reduce((a, s) => a + s.size, 0);
          expect(engine.weightBytes).toBe(
            paramLayout(model.config).reduce((a, s) => a + (s.shape.length === 2 ? 4 * Math.ceil(s.size / 2) : 4 * s.size), 0),
          );
          expect(engine.weightBytes / elements).toBeLessThan(2.2);
        }
      } finally {
        engine.destroy();
        engine.ctx.destroy();
      }
    },
    300_000,
  );

  it("packs two values per word, rounding to nearest even", () => {
    const packed = packWeights(Float32Array.from([1, -2, 1 + 2 ** -8, 3]), "bf16");
    expect(Array.from(packed)).toEqual([(0x3f80 | (0xc000 << 16)) >>> 0, (0x3f80 | (0x4040 << 16)) >>> 0]);
    expect(Array.from(packWeights(Float32Array.from([1, 0.5, 7]), "f16"))).toEqual([(0x3c00 | (0x3800 << 16)) >>> 0, 0x4700]);
    expect(Array.from(roundWeights(Float32Array.from([0.1]), "f16"))).toEqual([Math.fround(0.0999755859375)]);
  });

  it("refuses 16-bit weights for training", async () => {
    const ctx = await GpuContext.create();
    try {
      const model = await loadPretrained("test/fixtures/hf/llama-tied-llama3");
      expect(() => new GpuModel(ctx, model.config, flattenParams(model.config, model.weights), true, { weightFormat: "bf16" })).toThrow(
        /inference/,
      );
    } finally {
      ctx.destroy();
    }
  });
});

describe.skipIf(noGpu)("WebGPU engine: device limits", () => {
  it("refuses a model with a tensor over the storage binding limit, naming the tensor and the numbers", async () => {
    const ctx = await GpuContext.create();
    try {
      const limit = Math.min(ctx.device.limits.maxStorageBufferBindingSize, ctx.device.limits.maxBufferSize);
      // an embedding table just over the limit; its values never need to exist for the check
      const vocab = Math.floor(limit / 4 / 8) + 1;
      const config = {
        ...(await loadPretrained("test/fixtures/hf/llama-tied-llama3")).config,
        vocab_size: vocab,
        d_model: 8,
        n_heads: 2,
        n_kv_heads: 2,
        head_dim: 4,
        d_ff: 8,
        n_layers: 1,
      };
      expect(() => new GpuModel(ctx, config, new Float32Array(0), false)).toThrow(
        new RegExp(`tensor tok_embeddings \\(${vocab} x 8\\) needs ${vocab * 32} bytes in f32, over this device's ${limit}-byte`),
      );
    } finally {
      ctx.destroy();
    }
  });
});
