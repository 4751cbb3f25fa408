import { describe, expect, it } from "vitest";
import { batchFromTokens } from "../../src/model/batch.ts";
import { parseModelConfig, type ModelConfig } from "../../src/model/config.ts";
import { CpuTrainer } from "../../src/cpu/trainer.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import { forward } from "../../src/model/reference/model.ts";
import { applyChatTemplate, encode, PAD_ID, TOKENIZER_VOCAB_SIZE } from "../../src/model/tokenizer.ts";
import type { TokenBatch } from "../../src/model/train-types.ts";
import { ValidationError } from "../../src/types/errors.ts";
import { maxRelErr as maxRelError } from "../model/helpers.ts";
import { randomAdvantages, referenceGradients, responseCols } from "../gpu/policy-reference.ts";

const config: ModelConfig = parseModelConfig({
  vocab_size: TOKENIZER_VOCAB_SIZE,
  d_model: 16,
  n_layers: 2,
  n_heads: 4,
  n_kv_heads: 2,
  d_ff: 24,
  max_seq_len: 64,
  rope_theta: 10000,
  norm_eps: 1e-5,
  tie_embeddings: true,
});

/** Four chat rows of different lengths (so there is padding on both sides). */
function fixedBatch(): TokenBatch {
  const rows = [
    ["2+2?", "4"],
    ["Capital of France?", "Paris"],
    ["hi", "hello there"],
    ["Say no.", "no"],
  ].map(([q, a]) => ({ prompt: applyChatTemplate([{ role: "user", content: q }], { addGenerationPrompt: true }), response: encode(a) }));
  return batchFromTokens(rows, { padId: PAD_ID });
}

/** +1 on rows 0 and 2, -1 on rows 1 and 3, on every response token. */
function advantagesFor(batch: TokenBatch): Float32Array {
  const adv = new Float32Array(batch.n * batch.R);
  for (let i = 0; i < batch.n; i++) adv.fill(i % 2 === 0 ? 1 : -1, i * batch.R, (i + 1) * batch.R);
  return adv;
}

function maskedRowMean(x: Float32Array, batch: TokenBatch, row: number): number {
  let s = 0;
  let c = 0;
  const T = batch.P + batch.R;
  for (let t = 0; t < batch.R; t++)
    if (batch.attentionMask[row * T + batch.P + t] === 1) {
      s += x[row * batch.R + t];
      c++;
    }
  return s / c;
}

describe("CpuTrainer", () => {
  it("logProbs returns the reference forward's response columns", async () => {
    const trainer = new CpuTrainer({ config, seed: 3 });
    const batch = fixedBatch();
    const { log_probs, entropy } = await trainer.logProbs(batch, { microBatchSize: 3 });
    const ref = forward(config, initParams(config, 3), batch);
    const T = batch.P + batch.R;
    for (let i = 0; i < batch.n; i++)
      for (let t = 0; t < batch.R; t++) {
        expect(log_probs[i * batch.R + t]).toBe(ref.logprob[i * T + batch.P + t]);
        expect(entropy[i * batch.R + t]).toBe(ref.entropy[i * T + batch.P + t]);
      }
  });

  it("ten policy steps lower the loss and move log-probs towards the advantages", async () => {
    const trainer = new CpuTrainer({ config, seed: 1, lr: 3e-3, weightDecay: 0 });
    const batch = fixedBatch();
    const adv = advantagesFor(batch);
    const before = await trainer.logProbs(batch);
    const losses: number[] = [];
    for (let s = 0; s < 10; s++) {
      const m = await trainer.policyStep(batch, adv, before.log_probs, { clipRatio: 0.2 });
      expect(m.skipped).toBe(false);
      expect(m.step).toBe(s + 1);
      if (s === 0) expect(m.grad_norm).toBeGreaterThan(0); // later steps may clip every token (zero gradient)
      expect(m.tokens).toBe(1 + 5 + 11 + 2);
      losses.push(m.loss);
    }
    // At the old policy the ratio is 1, so the first loss is -masked_mean(A).
    expect(losses[0]).toBeCloseTo(-(1 + 11 - 5 - 2) / 19, 5);
    expect(losses[9]).toBeLessThan(losses[0] - 0.1);
    const after = await trainer.logProbs(batch);
    for (let row = 0; row < 4; row++) {
      const moved = maskedRowMean(after.log_probs, batch, row) - maskedRowMean(before.log_probs, batch, row);
      if (row % 2 === 0) expect(moved).toBeGreaterThan(0);
      else expect(moved).toBeLessThan(0);
    }
  });

  it("micro-batching gives the same step as one batch (up to float rounding)", async () => {
    const batch = fixedBatch();
    const adv = advantagesFor(batch);
    const a = new CpuTrainer({ config, seed: 2, lr: 1e-3 });
    const b = new CpuTrainer({ config, seed: 2, lr: 1e-3 });
    const old = (await a.logProbs(batch)).log_probs;
    const ma = await a.policyStep(batch, adv, old, { lossAggMode: "seq-mean-token-mean" });
    const mb = await b.policyStep(batch, adv, old, { lossAggMode: "seq-mean-token-mean", microBatchSize: 1 });
    expect(mb.loss).toBeCloseTo(ma.loss, 6);
    expect(mb.grad_norm).toBeCloseTo(ma.grad_norm, 5);
    const pa = (await a.getState()).params;
    const pb = (await b.getState()).params;
    let worst = 0;
    for (let i = 0; i < pa.length; i++) worst = Math.max(worst, Math.abs(pa[i] - pb[i]));
    expect(worst).toBeLessThan(1e-6);
  });

  it("skips and reports a step whose loss is not finite, leaving parameters and optimizer untouched", async () => {
    const trainer = new CpuTrainer({ config, seed: 4 });
    const batch = fixedBatch();
    const adv = advantagesFor(batch);
    adv[batch.R] = NaN; // row 1, first response token (a real token)
    const old = (await trainer.logProbs(batch)).log_probs;
    const before = await trainer.getState();
    const m = await trainer.policyStep(batch, adv, old);
    expect(m.skipped).toBe(true);
    expect(m.step).toBe(0);
    const after = await trainer.getState();
    expect(after.params).toEqual(before.params);
    expect(after.optimizer.step).toBe(0);
  });

  it("sftStep lowers the cross-entropy of the response tokens", async () => {
    const trainer = new CpuTrainer({ config, seed: 5, lr: 1e-2, weightDecay: 0 });
    const batch = fixedBatch();
    const first = await trainer.sftStep(batch);
    let last = first;
    for (let s = 0; s < 9; s++) last = await trainer.sftStep(batch, { microBatchSize: 2 });
    expect(first.loss).toBeGreaterThan(Math.log(TOKENIZER_VOCAB_SIZE) - 0.5); // near uniform at init
    expect(last.loss).toBeLessThan(first.loss - 0.5);
    expect(last.step).toBe(10);
  });

  it("temperature: log-probs and the PPO step of the logits divided by it, as the float64 reference gives them", async () => {
    const batch = fixedBatch();
    const T = 0.7;
    const params = initParams(config, 4);
    const trainer = new CpuTrainer({ config, params, lr: 0 });
    const ref = forward(config, Float64Array.from(params), batch, { temperature: T });
    const got = await trainer.logProbs(batch, { temperature: T, microBatchSize: 3 });
    expect(maxRelError(got.log_probs, responseCols(ref.logprob, batch))).toBeLessThan(1e-5);
    expect(maxRelError(got.entropy, responseCols(ref.entropy, batch))).toBeLessThan(1e-5);
    expect(maxRelError((await trainer.logProbs(batch)).log_probs, got.log_probs)).toBeGreaterThan(1e-2);
    // a PPO step whose old log-probs are off the current ones (so the ratio clips), with an entropy bonus
    const rng = new Rng(5);
    const old = got.log_probs.map((x) => x + 0.3 * rng.normal());
    const adv = randomAdvantages(rng, batch.n * batch.R);
    const options = { temperature: T, entropyCoeff: 0.01, microBatchSize: 2 };
    const want = referenceGradients(config, params, batch, adv, old, options);
    const m = await trainer.policyStep(batch, adv, old, options);
    expect(m.loss).toBeCloseTo(want.loss.loss, 5);
    expect(m.clip_frac).toBeCloseTo(want.loss.clip_frac, 6);
    expect(m.grad_norm).toBeCloseTo(Math.hypot(...want.grads), 4);
    const atOne = referenceGradients(config, params, batch, adv, old, { ...options, temperature: 1 });
    expect(Math.abs(Math.hypot(...atOne.grads) - m.grad_norm)).toBeGreaterThan(1e-3);
    for (const bad of [0, -1, Number.NaN])
      await expect(trainer.logProbs(batch, { temperature: bad })).rejects.toThrow(/temperature must be a finite number > 0/);
    await expect(trainer.policyStep(batch, adv, old, { temperature: 0 })).rejects.toThrow(ValidationError);
    trainer.close();
  });

  it("rejects malformed batches and tensors with typed errors", async () => {
    const trainer = new CpuTrainer({ config, seed: 6 });
    const batch = fixedBatch();
    await expect(trainer.policyStep(batch, new Float32Array(3), new Float32Array(batch.n * batch.R))).rejects.toThrow(/advantages/);
    await expect(trainer.logProbs({ ...batch, P: 0 })).rejects.toThrow(/P >= 1/);
    await expect(trainer.logProbs({ ...batch, attentionMask: batch.attentionMask.map((x) => x * 2) })).rejects.toThrow(/0 or 1/);
  });
});
