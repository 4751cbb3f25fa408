/**
 * Trains a few steps of a tiny model on WebGPU and prints one JSON line: the runtime, the adapter, the
 * losses and a digest of the final weights. test/gpu/cross-runtime.test.ts runs it under Node, Deno and
 * Bun and compares the lines. Exit code 3 with {"skip": reason} when this runtime has no adapter.
 */
import { describeAdapter } from "../../src/gpu/device.ts";
import { detectRuntime } from "../../src/gpu/navigator.ts";
import { GpuPolicyTrainer } from "../../src/gpu/trainer.ts";
import { batchFromTokens } from "../../src/model/batch.ts";
import type { ModelConfig } from "../../src/model/config.ts";
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

/** FNV-1a over the float bits: equal digests mean bit-identical weights. */
function digest(a: Float32Array): string {
  const bytes = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  let h = 0x811c9dc5;
  for (const b of bytes) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return h.toString(16).padStart(8, "0");
}

const ctx = await contextOrSkip();
const batch = batchFromTokens(
  [
    { prompt: [1, 2, 3], response: [4, 5, 6, 7] },
    { prompt: [8, 9], response: [10, 11] },
    { prompt: [12, 13, 14, 15], response: [16, 17, 18] },
  ],
  { padId: 0 },
);
const trainer = await GpuPolicyTrainer.create({ config, seed: 123, context: ctx, lr: 3e-3 });
const old = (await trainer.logProbs(batch)).log_probs;
const adv = old.map((_, i) => (i % 3 === 0 ? 1 : -0.5));
const losses: number[] = [];
for (let s = 0; s < 3; s++) losses.push((await trainer.policyStep(batch, adv, old, { microBatchSize: 2 })).loss);
const state = await trainer.getState();
let sum = 0;
for (const v of state.params) sum += v;
console.log(
  JSON.stringify({
    runtime: detectRuntime(),
    adapter: describeAdapter(ctx.handle!.report),
    losses,
    paramSum: sum,
    digest: digest(state.params),
  }),
);
trainer.destroy();
ctx.destroy();
exit(0);
