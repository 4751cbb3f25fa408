/**
 * Trains a LoRA adapter on a frozen Qwen3-like base for a few PPO steps (KL against the base's own
 * log-probs, micro-batches) on WebGPU and, beside it, with the CPU reference trainer, and prints one JSON
 * line: the runtime, the adapter, both runs' losses, how far the GPU's log-probs and adapter ended from the
 * CPU's, and a digest of the GPU's adapter. test/gpu/lora-cross-runtime.test.ts runs it under Node, Deno
 * and Bun. Exit code 3 with {"skip": reason} when this runtime has no adapter.
 */
import { describeAdapter } from "../../src/gpu/device.ts";
import { detectRuntime } from "../../src/gpu/navigator.ts";
import { GpuPolicyTrainer } from "../../src/gpu/trainer.ts";
import { batchFromTokens } from "../../src/model/batch.ts";
import { paramLayout, type ModelConfig } from "../../src/model/config.ts";
import { CpuTrainer } from "../../src/cpu/trainer.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import { parseLoraConfig } from "../../src/model/lora.ts";
import { contextOrSkip, exit } from "./script-env.ts";

const config: ModelConfig = {
  vocab_size: 40,
  d_model: 32,
  n_layers: 2,
  n_heads: 4,
  n_kv_heads: 2,
  head_dim: 6,
  d_ff: 48,
  max_seq_len: 32,
  rope_theta: 1000000,
  norm_eps: 1e-6,
  tie_embeddings: false,
  qkv_bias: true,
  qk_norm: true,
};
const lora = parseLoraConfig({
  r: 4,
  alpha: 8,
  targetModules: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
});

/** FNV-1a over the float bits: equal digests mean bit-identical tensors. */
function digest(a: Float32Array): string {
  const bytes = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  let h = 0x811c9dc5;
  for (const b of bytes) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return h.toString(16).padStart(8, "0");
}

/** Largest |a - b| relative to max(1, max |b|). */
function maxRel(a: Float32Array, b: Float32Array): number {
  let scale = 1;
  let err = 0;
  for (let i = 0; i < b.length; i++) scale = Math.max(scale, Math.abs(b[i]));
  for (let i = 0; i < a.length; i++) err = Math.max(err, Math.abs(a[i] - b[i]));
  return err / scale;
}

const ctx = await contextOrSkip();
const base = initParams(config, 7);
const rng = new Rng(8);
for (const s of paramLayout(config))
  if (s.shape.length === 1) for (let i = s.offset; i < s.offset + s.size; i++) base[i] += 0.2 * rng.normal();
const batch = batchFromTokens(
  [
    { prompt: [1, 2, 3], response: [4, 5, 6, 7] },
    { prompt: [8, 9], response: [10, 11] },
    { prompt: [12, 13, 14, 15], response: [16, 17, 18] },
  ],
  { padId: 0 },
);
const options = { lr: 1e-2, lora: { config: lora, base, seed: 5 } };
const gpu = await GpuPolicyTrainer.create({ config, context: ctx, ...options });
const cpu = new CpuTrainer({ config, ...options });
const ref = (await gpu.logProbs(batch, { baseOnly: true })).log_probs;
const old = ref.slice();
const adv = old.map((_, i) => (i % 3 === 0 ? 1 : -0.5));
const step = { microBatchSize: 2, klLossCoef: 0.1, klLossType: "low_var_kl" as const, refLogProbs: ref };
const losses: number[] = [];
const cpuLosses: number[] = [];
for (let s = 0; s < 3; s++) {
  losses.push((await gpu.policyStep(batch, adv, old, step)).loss);
  cpuLosses.push((await cpu.policyStep(batch, adv, old, step)).loss);
}
const adapter = (await gpu.getState()).params;
const cpuAdapter = (await cpu.getState()).params;
console.log(
  JSON.stringify({
    runtime: detectRuntime(),
    adapter: describeAdapter(ctx.handle!.report),
    losses,
    cpuLosses,
    logProbError: maxRel((await gpu.logProbs(batch)).log_probs, (await cpu.logProbs(batch)).log_probs),
    paramError: maxRel(adapter, cpuAdapter),
    digest: digest(adapter),
  }),
);
gpu.destroy();
ctx.destroy();
exit(0);
