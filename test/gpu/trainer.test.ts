import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GpuContext } from "../../src/gpu/context.ts";
import { GpuPolicyTrainer } from "../../src/gpu/trainer.ts";
import { CpuTrainer } from "../../src/cpu/trainer.ts";
import { backward, forward } from "../../src/model/reference/model.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import { resolveResponseMask, sliceRows } from "../../src/model/batch.ts";
import { decodeModel, decodeOptimizer, encodeModel, encodeOptimizer } from "../../src/model/checkpoint.ts";
import { normFromMask } from "../../src/model/ppo-loss.ts";
import type { ModelConfig } from "../../src/model/config.ts";
import { ValidationError } from "../../src/types/errors.ts";
import type { PolicyStepOptions, TokenBatch } from "../../src/model/train-types.ts";
import { maxRelError, noGpu } from "./gpu-env.ts";
import { fullCols, makeBatch, randomAdvantages, referenceGradients, responseCols } from "./policy-reference.ts";

function tinyConfig(tie: boolean): ModelConfig {
  return {
    vocab_size: 37,
    d_model: 24,
    n_layers: 2,
    n_heads: 4,
    n_kv_heads: 2,
    d_ff: 40,
    max_seq_len: 32,
    rope_theta: 10000,
    norm_eps: 1e-5,
    tie_embeddings: tie,
  };
}

describe.skipIf(noGpu)("GpuPolicyTrainer vs the CPU reference", { timeout: 180_000 }, () => {
  let ctx: GpuContext;
  beforeAll(async () => {
    ctx = await GpuContext.create();
  });
  afterAll(() => ctx?.destroy());

  it.each([true, false])("logProbs and entropies equal the CPU trainer's (tied embeddings: %s), with micro-batches", async (tie) => {
    const config = tinyConfig(tie);
    const rng = new Rng(7);
    const batch = makeBatch(rng, config.vocab_size, 5);
    const gpu = await GpuPolicyTrainer.create({ config, seed: 3, context: ctx });
    const cpu = new CpuTrainer({ config, seed: 3 });
    const want = await cpu.logProbs(batch);
    const got = await gpu.logProbs(batch, { microBatchSize: 2 });
    expect(maxRelError(got.log_probs, want.log_probs)).toBeLessThan(2e-5);
    expect(maxRelError(got.entropy, want.entropy)).toBeLessThan(2e-5);
    // the logits divided by the rollouts' temperature
    const wantHot = await cpu.logProbs(batch, { temperature: 0.6 });
    const gotHot = await gpu.logProbs(batch, { microBatchSize: 2, temperature: 0.6 });
    expect(maxRelError(gotHot.log_probs, wantHot.log_probs)).toBeLessThan(2e-5);
    expect(maxRelError(gotHot.entropy, wantHot.entropy)).toBeLessThan(2e-5);
    expect(maxRelError(gotHot.log_probs, got.log_probs)).toBeGreaterThan(1e-2);
    await expect(gpu.logProbs(batch, { temperature: 0 })).rejects.toThrow(/temperature must be a finite number > 0/);
    gpu.destroy();
    cpu.close();
  });

  it.each([
    ["token-mean", true, 0, 0, 1],
    ["seq-mean-token-mean", false, 0.01, 0.1, 1],
    ["seq-mean-token-sum", true, 0, 0.05, 0.7],
    ["seq-mean-token-sum-norm", false, 0.02, 0, 1.5],
  ] as const)(
    "policy gradient and metrics equal the CPU backward (%s, tied %s, entropy %s, kl %s, temperature %s)",
    async (mode, tie, entropyCoeff, klLossCoef, temperature) => {
      const config = tinyConfig(tie);
      const rng = new Rng(11);
      const batch = makeBatch(rng, config.vocab_size, 4);
      const params = initParams(config, 5);
      const gpu = await GpuPolicyTrainer.create({ config, params, context: ctx });
      const { log_probs } = await gpu.logProbs(batch, { temperature });
      // Old log-probs off the current ones so the ratio clips on some tokens; mixed-sign advantages.
      const old = log_probs.map((x) => x + 0.3 * rng.normal());
      const adv = randomAdvantages(rng, batch.n * batch.R);
      const ref = log_probs.map((x) => x + 0.2 * rng.normal());
      const options: PolicyStepOptions = {
        lossAggMode: mode,
        entropyCoeff,
        klLossCoef,
        klLossType: "low_var_kl",
        refLogProbs: ref,
        microBatchSize: 3,
        lr: 0,
        temperature,
      };
      const metrics = await gpu.policyStep(batch, adv, old, options);
      const want = referenceGradients(config, params, batch, adv, old, options);
      expect(maxRelError(await gpu.lastGradients(), want.grads)).toBeLessThan(1e-4);
      expect(metrics.loss).toBeCloseTo(want.loss.loss, 5);
      expect(metrics.pg_loss).toBeCloseTo(want.loss.pg_loss, 5);
      expect(metrics.entropy).toBeCloseTo(want.loss.entropy_loss, 4);
      expect(metrics.clip_frac).toBeCloseTo(want.loss.clip_frac, 6);
      expect(metrics.clip_frac).toBeGreaterThan(0);
      expect(metrics.clip_frac_lower).toBeCloseTo(want.loss.clip_frac_lower, 6);
      expect(metrics.approx_kl).toBeCloseTo(want.loss.approx_kl, 5);
      let ss = 0;
      for (const g of want.grads) ss += g * g;
      expect(metrics.grad_norm).toBeCloseTo(Math.sqrt(ss), 4);
      expect(metrics.skipped).toBe(false);
      gpu.destroy();
    },
  );

  it("one policyStep moves the parameters like the CPU trainer", async () => {
    const config = tinyConfig(true);
    const rng = new Rng(21);
    const batch = makeBatch(rng, config.vocab_size, 3);
    const gpu = await GpuPolicyTrainer.create({ config, seed: 9, context: ctx, lr: 1e-3 });
    const cpu = new CpuTrainer({ config, seed: 9, lr: 1e-3 });
    const old = (await cpu.logProbs(batch)).log_probs;
    const adv = randomAdvantages(rng, batch.n * batch.R);
    const mg = await gpu.policyStep(batch, adv, old);
    const mc = await cpu.policyStep(batch, adv, old);
    expect(mg.step).toBe(1);
    expect(mc.step).toBe(1);
    expect(mg.loss).toBeCloseTo(mc.loss, 5);
    expect(mg.grad_norm).toBeCloseTo(mc.grad_norm, 4);
    const pg = (await gpu.getState()).params;
    const pc = (await cpu.getState()).params;
    // Adam's first step is about lr * sign(g): allow a sign flip only where the gradient is ~0.
    let far = 0;
    for (let i = 0; i < pg.length; i++) if (Math.abs(pg[i] - pc[i]) > 1e-4) far++;
    expect(far / pg.length).toBeLessThan(0.01);
    gpu.destroy();
  });

  it("the SFT gradient equals the CPU reference cross-entropy gradient", async () => {
    const config = tinyConfig(false);
    const rng = new Rng(31);
    const batch = makeBatch(rng, config.vocab_size, 3);
    const params = initParams(config, 2);
    const gpu = await GpuPolicyTrainer.create({ config, params, context: ctx });
    const m = await gpu.sftStep(batch, { lr: 0 });
    const p64 = Float64Array.from(params);
    const out = forward(config, p64, batch);
    const mask = resolveResponseMask(batch);
    const tokens = normFromMask(mask, batch.n, batch.R).tokens;
    const lp = responseCols(out.logprob, batch);
    let nll = 0;
    for (let i = 0; i < lp.length; i++) nll -= (mask[i] * lp[i]) / (tokens + 1e-8);
    const grads = backward(
      config,
      p64,
      out.cache,
      fullCols(
        mask.map((x) => -x / (tokens + 1e-8)),
        batch,
      ),
      new Float64Array(batch.n * (batch.P + batch.R)),
    );
    expect(m.loss).toBeCloseTo(nll, 5);
    expect(maxRelError(await gpu.lastGradients(), grads)).toBeLessThan(1e-4);
    gpu.destroy();
  });

  it("ten policySteps on a fixed batch lower the loss and raise positive-advantage log-probs", async () => {
    const config = tinyConfig(true);
    const rng = new Rng(41);
    const batch = makeBatch(rng, config.vocab_size, 4);
    const gpu = await GpuPolicyTrainer.create({ config, seed: 1, context: ctx, lr: 3e-3 });
    const before = (await gpu.logProbs(batch)).log_probs;
    const adv = new Float32Array(batch.n * batch.R).map((_, i) => (Math.floor(i / batch.R) % 2 === 0 ? 1 : -1));
    const losses: number[] = [];
    for (let s = 0; s < 10; s++) losses.push((await gpu.policyStep(batch, adv, before)).loss);
    const after = (await gpu.logProbs(batch)).log_probs;
    expect(losses[9]).toBeLessThan(losses[0]);
    const mask = resolveResponseMask(batch);
    let up = 0;
    let down = 0;
    for (let i = 0; i < after.length; i++) {
      if (mask[i] === 0) continue;
      if (adv[i] > 0) up += after[i] - before[i];
      else down += after[i] - before[i];
    }
    expect(up).toBeGreaterThan(0);
    expect(down).toBeLessThan(0);
    gpu.destroy();
  });

  it("the same seed gives bit-identical weights twice; checkpoint save/load continues exactly", async () => {
    const config = tinyConfig(true);
    const rng = new Rng(51);
    const batch = makeBatch(rng, config.vocab_size, 3);
    const adv = randomAdvantages(rng, batch.n * batch.R);
    const run = async (): Promise<GpuPolicyTrainer> => {
      const t = await GpuPolicyTrainer.create({ config, seed: 4, context: ctx, lr: 1e-3 });
      const old = (await t.logProbs(batch)).log_probs;
      for (let s = 0; s < 3; s++) await t.policyStep(batch, adv, old, { microBatchSize: 2 });
      return t;
    };
    const a = await run();
    const b = await run();
    const sa = await a.getState();
    expect(sa.params).toEqual((await b.getState()).params);
    // Through the safetensors checkpoint format into a fresh trainer.
    const model = decodeModel(encodeModel(config, sa.params, sa.optimizer.step));
    const optimizer = decodeOptimizer(config, encodeOptimizer(config, sa.optimizer));
    const c = await GpuPolicyTrainer.create({ config, params: model.params, optimizer, context: ctx, lr: 1e-3 });
    const old = (await a.logProbs(batch)).log_probs;
    const ma = await a.policyStep(batch, adv, old);
    const mc = await c.policyStep(batch, adv, old);
    expect(mc.step).toBe(ma.step);
    expect((await c.getState()).params).toEqual((await a.getState()).params);
    for (const t of [a, b, c]) t.destroy();
  });

  it("a micro-batch over the device's buffer binding limit is refused with advice, and a smaller one then works", async () => {
    const config: ModelConfig = { ...tinyConfig(true), d_model: 8, n_heads: 2, n_kv_heads: 1, d_ff: 1 << 16, max_seq_len: 64 };
    const T = 64;
    const rows = Math.ceil((ctx.device.limits.maxStorageBufferBindingSize / 4 / config.d_ff + 1) / T);
    const ids = new Int32Array(rows * T).fill(1);
    const batch: TokenBatch = {
      n: rows,
      P: 32,
      R: 32,
      inputIds: ids,
      attentionMask: new Int32Array(rows * T).fill(1),
      positionIds: ids.map((_, i) => i % T),
    };
    const gpu = await GpuPolicyTrainer.create({ config, seed: 1, context: ctx });
    await expect(gpu.logProbs(batch)).rejects.toThrow(/microBatchSize/);
    const one = await gpu.logProbs(sliceRows(batch, 0, 1));
    expect(one.log_probs.every(Number.isFinite)).toBe(true);
    gpu.destroy();
  });

  it("calls made without awaiting, on two trainers sharing a context, run one at a time as in sequence", async () => {
    const config = tinyConfig(true);
    const batch = makeBatch(new Rng(71), config.vocab_size, 3);
    const adv = randomAdvantages(new Rng(72), batch.n * batch.R);
    const a = await GpuPolicyTrainer.create({ config, seed: 6, context: ctx, lr: 1e-3 });
    const b = await GpuPolicyTrainer.create({ config, seed: 6, context: ctx, lr: 1e-3 });
    const old = (await a.logProbs(batch)).log_probs;
    const [, , , , afterA, afterB] = await Promise.all([
      a.policyStep(batch, adv, old),
      b.policyStep(batch, adv, old),
      a.policyStep(batch, adv, old, { microBatchSize: 1 }),
      b.policyStep(batch, adv, old, { microBatchSize: 1 }),
      a.logProbs(batch),
      b.logProbs(batch),
    ]);
    const c = await GpuPolicyTrainer.create({ config, seed: 6, context: ctx, lr: 1e-3 });
    await c.policyStep(batch, adv, old);
    await c.policyStep(batch, adv, old, { microBatchSize: 1 });
    const want = (await c.logProbs(batch)).log_probs;
    expect(afterA.log_probs).toEqual(want);
    expect(afterB.log_probs).toEqual(want);
    for (const t of [a, b, c]) t.destroy();
  });

  it("bad input throws a ValidationError and changes nothing", async () => {
    const config = tinyConfig(true);
    await expect(GpuPolicyTrainer.create({ config: { ...config, n_kv_heads: 3 }, context: ctx })).rejects.toBeInstanceOf(ValidationError);
    const gpu = await GpuPolicyTrainer.create({ config, seed: 8, context: ctx });
    const batch = makeBatch(new Rng(5), config.vocab_size, 2);
    const before = (await gpu.getState()).params;
    const badId = { ...batch, inputIds: batch.inputIds.map((x, i) => (i === 3 ? config.vocab_size : x)) };
    await expect(gpu.logProbs(badId)).rejects.toBeInstanceOf(ValidationError);
    const badPos = { ...batch, positionIds: batch.positionIds.map((x, i) => (i === 1 ? config.max_seq_len : x)) };
    const zeros = new Float32Array(batch.n * batch.R);
    await expect(gpu.policyStep(badPos, zeros, zeros)).rejects.toBeInstanceOf(ValidationError);
    await expect(gpu.policyStep(batch, zeros.subarray(1), zeros)).rejects.toBeInstanceOf(ValidationError);
    expect((await gpu.getState()).params).toEqual(before);
    expect((await gpu.policyStep(batch, zeros, zeros)).step).toBe(1);
    gpu.destroy();
  });

  it("a non-finite loss skips the step and leaves the weights untouched", async () => {
    const config = tinyConfig(true);
    const rng = new Rng(61);
    const batch = makeBatch(rng, config.vocab_size, 2);
    const gpu = await GpuPolicyTrainer.create({ config, seed: 2, context: ctx, lr: 1e-2 });
    const old = (await gpu.logProbs(batch)).log_probs;
    const before = (await gpu.getState()).params;
    const adv = randomAdvantages(rng, batch.n * batch.R);
    const mask = resolveResponseMask(batch);
    // NaN on a masked-out token is ignored (lr 0 keeps the weights as they were)...
    const padded = mask.findIndex((x) => x === 0);
    expect(padded).toBeGreaterThanOrEqual(0);
    adv[padded] = NaN;
    const ok = await gpu.policyStep(batch, adv, old, { lr: 0 });
    expect(ok.skipped).toBe(false);
    expect(Number.isFinite(ok.loss)).toBe(true);
    // ...on a trained token it makes the loss NaN and the step is skipped.
    adv[mask.findIndex((x) => x === 1)] = NaN;
    const m = await gpu.policyStep(batch, adv, old);
    expect(m.skipped).toBe(true);
    expect(m.step).toBe(1);
    expect((await gpu.getState()).params).toEqual(before);
    gpu.destroy();
  });
});
