import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createCpuValueTrainer } from "../../src/cpu/value-trainer.ts";
import { batchFromTokens, resolveResponseMask } from "../../src/model/batch.ts";
import { saveCheckpoint } from "../../src/model/checkpoint.ts";
import { readSafetensorsHeader } from "../../src/model/safetensors.ts";
import { parseModelConfig, type ModelConfig } from "../../src/model/config.ts";
import { initParams } from "../../src/model/init.ts";
import { globalGradNorm } from "../../src/model/reference/optim.ts";
import { positionGradients, responseValues, valueBackward, valueForward } from "../../src/model/reference/value-model.ts";
import { applyChatTemplate, encode, PAD_ID, TOKENIZER_VOCAB_SIZE } from "../../src/model/tokenizer.ts";
import type { TokenBatch } from "../../src/model/train-types.ts";
import { valueLoss } from "../../src/model/value-loss.ts";
import { loadValueCheckpoint, saveValueCheckpoint } from "../../src/model/value-checkpoint.ts";
import { initValueParams, valueParamsFromPolicy } from "../../src/model/value-params.ts";
import { ValidationError } from "../../src/types/errors.ts";

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
  tie_embeddings: false,
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

/** Returns of +1 on rows 0 and 2, -1 on rows 1 and 3, on the response tokens. */
function returnsFor(batch: TokenBatch): Float32Array {
  const mask = resolveResponseMask(batch);
  return mask.map((m, k) => m * (Math.floor(k / batch.R) % 2 === 0 ? 1 : -1));
}

describe("CpuValueTrainer", () => {
  it("values() are the critic's outputs at column P - 1 + t of each response token, 0 off the response mask", async () => {
    const critic = createCpuValueTrainer({ config, seed: 3 });
    const batch = fixedBatch();
    const values = await critic.values(batch, { microBatchSize: 3 });
    const ref = responseValues(valueForward(config, initValueParams(config, 3), batch).values, batch.n, batch.P, batch.R);
    const mask = resolveResponseMask(batch);
    expect(mask.some((m) => m === 0)).toBe(true);
    for (let k = 0; k < values.length; k++) {
      if (mask[k] === 0) expect(values[k]).toBe(0);
      else expect(values[k]).toBeCloseTo(ref[k], 5);
    }
    critic.close();
  });

  it("valueStep's first step is the reference's loss and gradient norm, and ten steps fit the returns", async () => {
    const critic = createCpuValueTrainer({ config, seed: 1, lr: 3e-3, weightDecay: 0 });
    const batch = fixedBatch();
    const returns = returnsFor(batch);
    const old = await critic.values(batch);
    const mask = resolveResponseMask(batch);
    // the reference, in float64
    const p64 = Float64Array.from(initValueParams(config, 1));
    const fwd = valueForward(config, p64, batch);
    const ref = valueLoss({
      rows: batch.n,
      cols: batch.R,
      values: responseValues(fwd.values, batch.n, batch.P, batch.R),
      returns,
      oldValues: old,
      responseMask: mask,
    });
    const refNorm = globalGradNorm(valueBackward(config, p64, fwd.cache, positionGradients(ref.dValues, batch.n, batch.P, batch.R)));
    const losses: number[] = [];
    for (let s = 0; s < 10; s++) {
      const m = await critic.valueStep(batch, returns, old, { cliprangeValue: 0.5 });
      expect(m.skipped).toBe(false);
      expect(m.step).toBe(s + 1);
      expect(m.tokens).toBe(1 + 5 + 11 + 2);
      if (s === 0) {
        expect(m.vf_loss).toBeCloseTo(ref.vf_loss, 5);
        expect(m.vpred_mean).toBeCloseTo(ref.vpred_mean, 5);
        expect(m.vf_clipfrac).toBe(0); // the predictions are the old values
        expect(m.grad_norm / refNorm).toBeCloseTo(1, 4);
      }
      losses.push(m.vf_loss);
    }
    expect(losses[9]).toBeLessThan(0.5 * losses[0]);
    // later steps move past old ± 0.5 on some tokens: the clip shows
    const last = await critic.valueStep(batch, returns, old, { cliprangeValue: 0.05 });
    expect(last.vf_clipfrac).toBeGreaterThan(0);
    critic.close();
  });

  it.each(["wasm", "reference"] as const)(
    "a valueStep after values() on the same tokens reuses that forward: the same bits as a step of its own (%s)",
    async (ops) => {
      const batch = fixedBatch();
      const returns = returnsFor(batch);
      const other = { ...batch, inputIds: batch.inputIds.slice() };
      const at = 2 * (batch.P + batch.R) + batch.P + 1; // row 2's second response token
      expect(batch.attentionMask[at]).toBe(1);
      other.inputIds[at] = (other.inputIds[at] + 1) % TOKENIZER_VOCAB_SIZE;
      const withValues = createCpuValueTrainer({ config, seed: 9, lr: 1e-3, ops });
      const alone = createCpuValueTrainer({ config, seed: 9, lr: 1e-3, ops });
      // after values(): a step on the kept forward (given a copy of the batch: the same tokens), a step on
      // tokens that differ from the kept ones, and two steps on the same tokens (the second after the first
      // changed the critic)
      const plan = [
        { values: { ...batch, inputIds: batch.inputIds.slice() }, steps: [batch] },
        { values: batch, steps: [other] },
        { values: batch, steps: [batch, batch] },
      ];
      for (const p of plan) {
        const old = await withValues.values(p.values);
        for (const step of p.steps) {
          const a = await withValues.valueStep(step, returns, old);
          const b = await alone.valueStep(step, returns, old);
          expect(a).toEqual(b);
          expect((await withValues.getState()).params).toEqual((await alone.getState()).params);
        }
      }
      withValues.close();
      alone.close();
    },
  );

  it("micro-batching gives the same step as one batch (up to float rounding)", async () => {
    const batch = fixedBatch();
    const returns = returnsFor(batch);
    const a = createCpuValueTrainer({ config, seed: 2, lr: 1e-3 });
    const b = createCpuValueTrainer({ config, seed: 2, lr: 1e-3 });
    const old = await a.values(batch);
    for (const mode of ["token-mean", "seq-mean-token-mean"] as const) {
      const ma = await a.valueStep(batch, returns, old, { lossAggMode: mode });
      const mb = await b.valueStep(batch, returns, old, { lossAggMode: mode, microBatchSize: 1 });
      expect(mb.vf_loss).toBeCloseTo(ma.vf_loss, 5);
      expect(mb.grad_norm / ma.grad_norm).toBeCloseTo(1, 4);
    }
    const [pa, pb] = [(await a.getState()).params, (await b.getState()).params];
    let worst = 0;
    for (let i = 0; i < pa.length; i++) worst = Math.max(worst, Math.abs(pa[i] - pb[i]));
    expect(worst).toBeLessThan(1e-6);
    a.close();
    b.close();
  });

  it("getState / setState round-trips: a restored critic continues bit-exactly", async () => {
    const batch = fixedBatch();
    const returns = returnsFor(batch);
    const a = createCpuValueTrainer({ config, seed: 4, lr: 2e-3 });
    const old = await a.values(batch);
    await a.valueStep(batch, returns, old);
    const saved = await a.getState();
    await a.valueStep(batch, returns, old);
    const after = await a.getState();
    expect(after.optimizer.step).toBe(2);
    // the optimizer's settings are the trainer's options, not its state
    const b = createCpuValueTrainer({ config, seed: 99, lr: 2e-3 });
    await b.setState(saved);
    saved.params.fill(0); // the trainer holds its own copy
    await b.valueStep(batch, returns, old);
    const resumed = await b.getState();
    expect(resumed.params).toEqual(after.params);
    expect(resumed.optimizer).toEqual(after.optimizer);
    // the state also starts a new trainer
    const c = createCpuValueTrainer({ config, params: resumed.params, optimizer: resumed.optimizer, lr: 2e-3 });
    expect(await c.values(batch)).toEqual(await b.values(batch));
    await expect(b.setState({ ...resumed, config: { ...config, d_ff: 8 } })).rejects.toThrow(/different model config/);
    await expect(b.setState({ ...resumed, params: resumed.params.subarray(1) })).rejects.toThrow(ValidationError);
    for (const t of [a, b, c]) t.close();
  });

  it("a critic checkpoint on disk holds the value head and the optimizer: loaded back, the critic continues bit-exactly", async () => {
    const dir = await mkdtemp(join(tmpdir(), "critic-ckpt-"));
    try {
      const batch = fixedBatch();
      const returns = returnsFor(batch);
      const a = createCpuValueTrainer({ config, seed: 5, lr: 2e-3 });
      const old = await a.values(batch);
      await a.valueStep(batch, returns, old);
      const saved = await a.getState();
      await saveValueCheckpoint(dir, saved);
      const loaded = await loadValueCheckpoint(dir);
      expect(loaded.config).toEqual(saved.config);
      expect(loaded.params).toEqual(saved.params);
      expect(loaded.optimizer).toEqual(saved.optimizer);
      await a.valueStep(batch, returns, old);
      const b = createCpuValueTrainer({ config, params: loaded.params, optimizer: loaded.optimizer, lr: 2e-3 });
      await b.valueStep(batch, returns, old);
      expect((await b.getState()).params).toEqual((await a.getState()).params);
      // the value head is in the file under its own names, and a policy checkpoint is not a critic's
      const tensors = readSafetensorsHeader(new Uint8Array(await readFile(join(dir, "model.safetensors")))).tensors;
      expect(tensors["value_head.weight"].shape).toEqual([config.d_model, 1]);
      expect(tensors).not.toHaveProperty("lm_head.weight");
      await saveCheckpoint(join(dir, "policy"), { config, params: initParams(config, 1) });
      await expect(loadValueCheckpoint(join(dir, "policy"))).rejects.toThrow(/value_head|optimizer/);
      for (const t of [a, b]) t.close();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("starts from a policy's weights with a fresh head, and from a smaller config of its own", async () => {
    const policy = initParams(config, 7);
    const critic = createCpuValueTrainer({ config, policyParams: policy, seed: 5, ops: "reference" });
    const batch = fixedBatch();
    const expected = valueForward(config, valueParamsFromPolicy(config, policy, 5), batch);
    const mask = resolveResponseMask(batch);
    const want = responseValues(expected.values, batch.n, batch.P, batch.R).map((v, k) => (mask[k] === 0 ? 0 : v));
    expect(await critic.values(batch)).toEqual(want);
    const small = createCpuValueTrainer({ config: { ...config, n_layers: 1, d_model: 8, n_heads: 2, n_kv_heads: 1 }, seed: 1 });
    const m = await small.valueStep(batch, returnsFor(batch), await small.values(batch));
    expect(m.skipped).toBe(false);
    small.close();
    expect(() => createCpuValueTrainer({ config, policyParams: policy, params: initValueParams(config, 0) })).toThrow(/not both/);
    expect(() => createCpuValueTrainer({ config, params: policy })).toThrow(/params has/);
  });

  it("the Wasm engine and the plain-TS reference give the same step (within float32 rounding)", async () => {
    const batch = fixedBatch();
    const returns = returnsFor(batch);
    const w = createCpuValueTrainer({ config, seed: 6, lr: 1e-3 });
    const r = createCpuValueTrainer({ config, seed: 6, lr: 1e-3, ops: "reference" });
    expect(w.opsChoice).toBe("wasm");
    const old = await r.values(batch);
    const vw = await w.values(batch);
    for (let k = 0; k < old.length; k++) expect(vw[k]).toBeCloseTo(old[k], 5);
    const mw = await w.valueStep(batch, returns, old);
    const mr = await r.valueStep(batch, returns, old);
    expect(mw.vf_loss).toBeCloseTo(mr.vf_loss, 5);
    expect(mw.grad_norm / mr.grad_norm).toBeCloseTo(1, 4);
    w.close();
  });

  it("skips a step whose loss is not finite, and rejects malformed input with typed errors", async () => {
    const batch = fixedBatch();
    const critic = createCpuValueTrainer({ config, seed: 8 });
    const old = await critic.values(batch);
    const before = await critic.getState();
    const bad = returnsFor(batch);
    bad[batch.R] = Number.NaN; // row 1's first token is a response token
    const m = await critic.valueStep(batch, bad, old);
    expect(m.skipped).toBe(true);
    expect(m.step).toBe(0);
    expect((await critic.getState()).params).toEqual(before.params);
    await expect(critic.valueStep(batch, bad.subarray(1), old)).rejects.toThrow(/returns has/);
    await expect(critic.valueStep(batch, bad, old.subarray(2))).rejects.toThrow(/oldValues has/);
    await expect(critic.valueStep(batch, returnsFor(batch), old, { cliprangeValue: -1 })).rejects.toThrow(ValidationError);
    await expect(critic.values({ ...batch, P: 0 })).rejects.toThrow(/P >= 1/);
    critic.close();
  });
});
