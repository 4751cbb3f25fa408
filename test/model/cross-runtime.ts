/**
 * Cross-runtime check of the CPU model: seeded init, two policy steps, an SFT step, a checkpoint
 * round trip and seeded sampling, reduced to digests of the exact bits. Prints one JSON line; run with
 * `npx tsx`, `npx deno run -A` or `npx bun`. test/model/runtimes.test.ts runs all three and compares.
 */
import { batchFromTokens } from "../../src/model/batch.ts";
import { decodeModel, encodeModel } from "../../src/model/checkpoint.ts";
import { parseModelConfig } from "../../src/model/config.ts";
import { CpuTrainer } from "../../src/cpu/trainer.ts";
import { generate } from "../../src/model/generate.ts";
import { initParams } from "../../src/model/init.ts";
import { applyChatTemplate, encode, PAD_ID, TOKENIZER_VOCAB_SIZE } from "../../src/model/tokenizer.ts";

function digest(x: Float32Array | number[]): string {
  const words = x instanceof Float32Array ? new Uint32Array(x.buffer, x.byteOffset, x.length) : Uint32Array.from(x);
  let h = 0x811c9dc5;
  for (const w of words) h = Math.imul(h ^ w, 0x01000193) >>> 0;
  return h.toString(16);
}

const runtime = "Deno" in globalThis ? "deno" : "Bun" in globalThis ? "bun" : "node";
const config = parseModelConfig({
  vocab_size: TOKENIZER_VOCAB_SIZE,
  d_model: 16,
  n_layers: 2,
  n_heads: 4,
  n_kv_heads: 2,
  d_ff: 24,
  max_seq_len: 48,
  rope_theta: 10000,
  norm_eps: 1e-5,
  tie_embeddings: true,
});
const batch = batchFromTokens(
  [
    { prompt: applyChatTemplate([{ role: "user", content: "2+2?" }], { addGenerationPrompt: true }), response: encode("4") },
    { prompt: applyChatTemplate([{ role: "user", content: "hi" }], { addGenerationPrompt: true }), response: encode("hello") },
  ],
  { padId: PAD_ID },
);
const trainer = new CpuTrainer({ config, seed: 9, lr: 1e-3 });
const init = initParams(config, 9);
const old = (await trainer.logProbs(batch)).log_probs;
const adv = Float32Array.from({ length: batch.n * batch.R }, (_, k) => (k < batch.R ? 1 : -1));
const losses: number[] = [];
for (let s = 0; s < 2; s++) losses.push((await trainer.policyStep(batch, adv, old, { entropyCoeff: 0.01 })).loss);
losses.push((await trainer.sftStep(batch)).loss);
const state = await trainer.getState();
const roundTrip = decodeModel(encodeModel(config, state.params, state.optimizer.step)).params;
const sample = generate(config, state.params, applyChatTemplate([{ role: "user", content: "yo" }], { addGenerationPrompt: true }), {
  maxTokens: 12,
  temperature: 1,
  topP: 0.9,
  seed: 3,
});
console.log(
  JSON.stringify({
    runtime,
    init: digest(init),
    trained: digest(state.params),
    moments: digest(state.optimizer.v),
    losses: digest(Float32Array.from(losses)),
    checkpointRoundTrip: digest(roundTrip) === digest(state.params),
    sample: sample.tokens.join(","),
  }),
);
