/**
 * Training the Hugging Face architectures on WebGPU: the q/k/v step (biases, per-head q/k RMSNorm) forward
 * and backward against the reference ops on random odd shapes, and for each golden checkpoint
 * (test/fixtures/hf: Llama with llama3 RoPE, GQA Llama, Qwen2 with biases, Qwen3 with qk-norm and
 * head_dim != d/heads) the GPU trainer's log-probs, gradients and first AdamW step equal the CPU reference's.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GpuContext } from "../../src/gpu/context.ts";
import { biasBackward } from "../../src/gpu/kernels/bias.ts";
import { finishQkv, finishQkvBackward, qkvBuffers, allocQkNorm } from "../../src/gpu/qk.ts";
import { GpuPolicyTrainer } from "../../src/gpu/trainer.ts";
import type { ModelConfig } from "../../src/model/config.ts";
import { CpuTrainer } from "../../src/cpu/trainer.ts";
import { loadPretrained } from "../../src/model/hf/index.ts";
import { Rng } from "../../src/model/init.ts";
import { flattenParams, paramViews } from "../../src/model/params.ts";
import * as ops from "../../src/model/reference/ops.ts";
import { maxRelError, noGpu, randn } from "./gpu-env.ts";
import { makeBatch, randomAdvantages, referenceGradients } from "./policy-reference.ts";

const CASES = ["llama-tied-llama3", "llama-untied-gqa-sharded", "qwen2-bias-tied", "qwen3-qknorm-headdim"];
const TOL = 2e-5;

describe.skipIf(noGpu)("WebGPU q/k/v step vs the reference ops", { timeout: 120_000 }, () => {
  let ctx: GpuContext;
  beforeAll(async () => {
    ctx = await GpuContext.create();
  });
  afterAll(() => ctx?.destroy());

  it.each([
    [1, 1],
    [7, 13],
    [129, 300],
  ])("bias gradient adds column sums, rows=%i cols=%i", async (rows, cols) => {
    const rng = new Rng(rows * cols);
    const dy = randn(rng, rows * cols);
    const g0 = randn(rng, cols);
    const g = ctx.upload(g0);
    biasBackward(ctx, ctx.upload(dy), g, rows, cols);
    expect(maxRelError(await ctx.read(g), ops.add(g0, ops.columnSums(dy, rows, cols)))).toBeLessThan(TOL);
  });

  it.each([
    [true, true, 7, 3, 1, 10],
    [true, false, 5, 4, 2, 6],
    [false, true, 11, 5, 5, 14],
  ])("bias %s, qk-norm %s: forward and backward, rows=%i heads=%i kv=%i hd=%i", async (bias, norm, rows, heads, kv, hd) => {
    const c: ModelConfig = {
      vocab_size: 8,
      d_model: 8,
      n_layers: 1,
      n_heads: heads,
      n_kv_heads: kv,
      head_dim: hd,
      d_ff: 8,
      max_seq_len: 8,
      rope_theta: 10000,
      norm_eps: 1e-6,
      tie_embeddings: true,
      qkv_bias: bias,
      qk_norm: norm,
    };
    const rng = new Rng(rows + 100 * heads);
    const qd = heads * hd;
    const kvd = kv * hd;
    const w: Record<string, Float32Array> = {
      bq: randn(rng, qd),
      bk: randn(rng, kvd),
      bv: randn(rng, kvd),
      q_norm: randn(rng, hd),
      k_norm: randn(rng, hd),
    };
    const g0: Record<string, Float32Array> = Object.fromEntries(Object.entries(w).map(([n, t]) => [n, randn(rng, t.length)]));
    const P = Object.fromEntries(Object.entries(w).map(([n, t]) => [n, ctx.upload(t)]));
    const G = Object.fromEntries(Object.entries(g0).map(([n, t]) => [n, ctx.upload(t)]));
    const q0 = randn(rng, rows * qd, 2);
    const k0 = randn(rng, rows * kvd, 2);
    const v0 = randn(rng, rows * kvd);
    const b = qkvBuffers(
      ctx.alloc(rows * qd),
      ctx.alloc(rows * kvd),
      ctx.upload(v0),
      allocQkNorm(c, rows, (n) => ctx.alloc(n)),
    );
    ctx.write(b.qProj, q0);
    ctx.write(b.kProj, k0);
    finishQkv(ctx, c, (n) => P[n], b, rows);

    // reference forward
    const q = Float64Array.from(q0);
    const k = Float64Array.from(k0);
    const v = Float64Array.from(v0);
    if (bias) {
      ops.addBiasInPlace(q, w.bq);
      ops.addBiasInPlace(k, w.bk);
      ops.addBiasInPlace(v, w.bv);
    }
    const qn = ops.rmsnorm(q, w.q_norm, { rows: rows * heads, dim: hd, eps: c.norm_eps });
    const kn = ops.rmsnorm(k, w.k_norm, { rows: rows * kv, dim: hd, eps: c.norm_eps });
    expect(maxRelError(await ctx.read(b.q, rows * qd), norm ? qn.y : q)).toBeLessThan(TOL);
    expect(maxRelError(await ctx.read(b.k, rows * kvd), norm ? kn.y : k)).toBeLessThan(TOL);
    expect(maxRelError(await ctx.read(b.v, rows * kvd), v)).toBeLessThan(TOL);

    // backward from random upstream gradients
    const dq0 = randn(rng, rows * qd);
    const dk0 = randn(rng, rows * kvd);
    const dv0 = randn(rng, rows * kvd);
    const d = {
      dq: ctx.upload(dq0),
      dk: ctx.upload(dk0),
      dv: ctx.upload(dv0),
      dqProj: norm ? ctx.alloc(rows * qd) : null,
      dkProj: norm ? ctx.alloc(rows * kvd) : null,
    };
    const out = finishQkvBackward(
      ctx,
      c,
      (n) => P[n],
      (n) => G[n],
      b,
      d,
      rows,
    );
    let dq: ops.Arr = dq0;
    let dk: ops.Arr = dk0;
    const wantG: Record<string, ArrayLike<number>> = { ...g0 };
    if (norm) {
      const bq = ops.rmsnormBackward(q, w.q_norm, qn.rstd, dq0, { rows: rows * heads, dim: hd });
      const bk = ops.rmsnormBackward(k, w.k_norm, kn.rstd, dk0, { rows: rows * kv, dim: hd });
      dq = bq.dx;
      dk = bk.dx;
      wantG.q_norm = ops.add(g0.q_norm, bq.dw);
      wantG.k_norm = ops.add(g0.k_norm, bk.dw);
    }
    if (bias) {
      wantG.bq = ops.add(g0.bq, ops.columnSums(dq, rows, qd));
      wantG.bk = ops.add(g0.bk, ops.columnSums(dk, rows, kvd));
      wantG.bv = ops.add(g0.bv, ops.columnSums(dv0, rows, kvd));
    }
    expect(maxRelError(await ctx.read(out.dq, rows * qd), dq)).toBeLessThan(TOL);
    expect(maxRelError(await ctx.read(out.dk, rows * kvd), dk)).toBeLessThan(TOL);
    for (const [n, want] of Object.entries(wantG)) expect(maxRelError(await ctx.read(G[n]), want), n).toBeLessThan(TOL);
  });
});

describe.skipIf(noGpu)("GpuPolicyTrainer on the Hugging Face architectures vs the CPU reference", { timeout: 300_000 }, () => {
  let ctx: GpuContext;
  beforeAll(async () => {
    ctx = await GpuContext.create();
  });
  afterAll(() => ctx?.destroy());

  it.each(CASES)("%s: log-probs, PPO gradients (micro-batched) and grad norm equal the CPU reference", async (name) => {
    const model = await loadPretrained(`test/fixtures/hf/${name}`);
    const config = model.config;
    const flat = flattenParams(config, model.weights);
    const rng = new Rng(17);
    const batch = makeBatch(rng, config.vocab_size, 5);
    // the loaded model's tensors by name go straight to the GPU
    const gpu = await GpuPolicyTrainer.create({ config, params: model.weights, context: ctx });
    try {
      const want = await new CpuTrainer({ config, params: flat }).logProbs(batch);
      const got = await gpu.logProbs(batch, { microBatchSize: 2 });
      expect(maxRelError(got.log_probs, want.log_probs)).toBeLessThan(2e-5);
      expect(maxRelError(got.entropy, want.entropy)).toBeLessThan(2e-5);
      const old = got.log_probs.map((x) => x + 0.3 * rng.normal());
      const adv = randomAdvantages(rng, batch.n * batch.R);
      const options = { microBatchSize: 2, entropyCoeff: 0.01, lr: 0 };
      const metrics = await gpu.policyStep(batch, adv, old, options);
      const ref = referenceGradients(config, flat, batch, adv, old, options);
      expect(maxRelError(await gpu.lastGradients(), ref.grads)).toBeLessThan(1e-4);
      expect(metrics.loss).toBeCloseTo(ref.loss.loss, 5);
      let ss = 0;
      for (const g of ref.grads) ss += g * g;
      expect(metrics.grad_norm).toBeCloseTo(Math.sqrt(ss), 4);
    } finally {
      gpu.destroy();
    }
  });

  it.each(["qwen2-bias-tied", "qwen3-qknorm-headdim"])(
    "%s: an SFT step moves every tensor like the CPU trainer, and steps lower the loss",
    async (name) => {
      const model = await loadPretrained(`test/fixtures/hf/${name}`);
      const config = model.config;
      const batch = makeBatch(new Rng(23), config.vocab_size, 4);
      const gpu = await GpuPolicyTrainer.create({ config, params: model.weights, context: ctx, lr: 1e-3 });
      try {
        const cpu = new CpuTrainer({ config, params: flattenParams(config, model.weights), lr: 1e-3 });
        const mg = await gpu.sftStep(batch);
        const mc = await cpu.sftStep(batch);
        expect(mg.loss).toBeCloseTo(mc.loss, 5);
        const pg = (await gpu.getState()).params;
        const pc = (await cpu.getState()).params;
        // Adam's first step is about lr * sign(g): allow a sign flip only where the gradient is ~0.
        let far = 0;
        for (let i = 0; i < pg.length; i++) if (Math.abs(pg[i] - pc[i]) > 1e-4) far++;
        expect(far / pg.length).toBeLessThan(0.01);
        // the bias and norm tensors moved (they were trained, not frozen)
        const after = paramViews(config, pg);
        const moved = (n: string): boolean => after[n].some((x, i) => x !== model.weights[n][i]);
        const trained = config.qk_norm ? ["layers.0.q_norm", "layers.1.k_norm"] : ["layers.0.bq", "layers.1.bv"];
        for (const n of trained) expect(moved(n), n).toBe(true);
        const losses = [mg.loss];
        for (let s = 0; s < 4; s++) losses.push((await gpu.sftStep(batch)).loss);
        expect(losses[4]).toBeLessThan(losses[0]);
      } finally {
        gpu.destroy();
      }
    },
  );
});
