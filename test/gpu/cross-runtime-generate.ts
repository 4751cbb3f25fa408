/**
 * KV-cached greedy and seeded-sampling generation on WebGPU for a batch of prompts of different lengths,
 * and for Hugging Face checkpoints of each architecture (test/fixtures/hf), checked against the CPU engine
 * in the same process; prints one JSON line (runtime, adapter, tokens,
 * whether they equal the CPU engine's). test/gpu/cross-runtime-generate.test.ts runs it under Node, Deno
 * and Bun. Exit code 3 with {"skip": reason} when this runtime has no adapter.
 */
import { describeAdapter } from "../../src/gpu/device.ts";
import { detectRuntime } from "../../src/gpu/navigator.ts";
import type { ModelConfig } from "../../src/model/config.ts";
import { loadPretrained } from "../../src/model/hf/index.ts";
import { initParams } from "../../src/model/init.ts";
import type { GenerationRequest } from "../../src/model/generation.ts";
import { cpuGenerationEngine } from "../../src/cpu/generation.ts";
import { GpuGenerationEngine } from "../../src/gpu/generation.ts";
import { contextOrSkip, exit } from "./script-env.ts";

const config: ModelConfig = {
  vocab_size: 40,
  d_model: 32,
  n_layers: 2,
  n_heads: 4,
  n_kv_heads: 2,
  d_ff: 48,
  max_seq_len: 32,
  rope_theta: 10000,
  norm_eps: 1e-5,
  tie_embeddings: true,
};

const ctx = await contextOrSkip();
const params = initParams(config, 21);
const prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11], [12]];
const requests: GenerationRequest[] = [
  ...prompts.map((prompt) => ({ prompt, maxTokens: 8, temperature: 0, stopTokenIds: [] })),
  ...prompts.map((prompt, i) => ({ prompt, maxTokens: 8, temperature: 0.9, topP: 0.95, seed: 40 + i, stopTokenIds: [] })),
];
const engine = new GpuGenerationEngine(ctx);
const gpu = await engine.generate(config, params, requests);
const cpu = await cpuGenerationEngine.generate(config, params, requests);
// The Hugging Face architectures too (q/k/v bias, qk-norm, llama3 RoPE), loaded from the golden fixtures.
for (const name of ["llama-tied-llama3", "qwen2-bias-tied", "qwen3-qknorm-headdim"]) {
  const model = await loadPretrained(`test/fixtures/hf/${name}`);
  const hfRequests = prompts.map((prompt) => ({ prompt, maxTokens: 6, temperature: 0, stopTokenIds: [] }));
  gpu.push(...(await engine.generate(model.config, model.weights, hfRequests)));
  cpu.push(...(await cpuGenerationEngine.generate(model.config, model.weights, hfRequests)));
}
const tokens = gpu.map((g) => g.tokenIds);
console.log(
  JSON.stringify({
    runtime: detectRuntime(),
    adapter: describeAdapter(ctx.handle!.report),
    tokens,
    sameAsCpu: JSON.stringify(tokens) === JSON.stringify(cpu.map((g) => g.tokenIds)),
  }),
);
engine.destroy();
ctx.destroy();
exit(0);
