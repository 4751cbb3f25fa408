/**
 * LoRA on WebGPU (docs/lora.md): the scale uniform of the matmul kernels against the reference; a LoRA
 * model's log-probs and adapter gradients against the CPU reference (`forward(..., { lora })`,
 * `backwardLora`) on a Llama-like and a Qwen3-like config (biases, qk-norm, head_dim != d_model/heads,
 * GQA) with non-zero lora_b; PPO and SFT steps equal to the CpuTrainer's, with a float32 base and (within a
 * stated tolerance) a bf16 one; step 0 equal to the base; `baseOnly`; activation checkpointing giving the
 * same gradients; the trainer's state; the factory; generation with an adapter equal to the CPU engine's.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GpuContext } from "../../src/gpu/context.ts";
import { createPolicyTrainer } from "../../src/engine/factory.ts";
import { matmul } from "../../src/gpu/kernels/matmul.ts";
import { matmulRows } from "../../src/gpu/kernels/matmul-rows.ts";
import { roundWeights } from "../../src/gpu/kernels/weights.ts";
import { GpuPolicyTrainer } from "../../src/gpu/trainer.ts";
import type { GenerationRequest } from "../../src/model/generation.ts";
import { cpuGenerationEngine } from "../../src/cpu/generation.ts";
import { GpuGenerationEngine } from "../../src/gpu/generation.ts";
import { paramCount, paramLayout, type ModelConfig } from "../../src/model/config.ts";
import { CpuTrainer } from "../../src/cpu/trainer.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import { initLora, loraParamCount, parseLoraConfig, type LoraConfig } from "../../src/model/lora.ts";
import { forward } from "../../src/model/reference/model.ts";
import * as ops from "../../src/model/reference/ops.ts";
import type { PolicyStepOptions } from "../../src/model/train-types.ts";
import { ValidationError } from "../../src/types/errors.ts";
import { maxRelError, noGpu, randn } from "./gpu-env.ts";
import { makeBatch, randomAdvantages, referenceGradients, responseCols } from "./policy-reference.ts";

const LLAMA: ModelConfig = {
  vocab_size: 37,
  d_model: 24,
  n_layers: 2,
  n_heads: 4,
  n_kv_heads: 2,
  d_ff: 40,
  max_seq_len: 32,
  rope_theta: 10000,
  norm_eps: 1e-5,
  tie_embeddings: true,
};

/** Qwen3-like: q/k/v biases (Qwen2's) and per-head q/k norms, head_dim 6 != 20 / 4, GQA, untied head. */
const QWEN3: ModelConfig = {
  vocab_size: 41,
  d_model: 20,
  n_layers: 2,
  n_heads: 4,
  n_kv_heads: 2,
  head_dim: 6,
  d_ff: 36,
  max_seq_len: 32,
  rope_theta: 1000000,
  norm_eps: 1e-6,
  tie_embeddings: false,
  qkv_bias: true,
  qk_norm: true,
};

const ALL_TARGETS = parseLoraConfig({
  r: 4,
  alpha: 8,
  targetModules: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
});
const QV = parseLoraConfig({ r: 3, alpha: 12, targetModules: ["q_proj", "v_proj"] });

const CASES: Array<[string, ModelConfig, LoraConfig]> = [
  ["llama-like, q_proj + v_proj, r 3", LLAMA, QV],
  ["qwen3-like, all seven targets, r 4", QWEN3, ALL_TARGETS],
];

/** Random base weights: init, with norms and biases moved off 1 and 0 so they matter. */
function randomBase(config: ModelConfig, seed: number): Float32Array {
  const rng = new Rng(seed);
  const p = initParams(config, seed);
  for (const s of paramLayout(config))
    if (s.shape.length === 1) for (let i = s.offset; i < s.offset + s.size; i++) p[i] += 0.2 * rng.normal();
  return p;
}

/** An adapter with every tensor random (lora_b non-zero), so the adapter changes the outputs. */
function randomAdapter(config: ModelConfig, lora: LoraConfig, seed: number): Float32Array {
  return randn(new Rng(seed), loraParamCount(config, lora), 0.15);
}

/** [rows, cols] -> [cols, rows]. */
function transpose(x: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(x.length);
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) out[j * rows + i] = x[i * cols + j];
  return out;
}

/** Fraction of entries farther apart than `tol` (Adam's first step is about lr * sign(g), so a gradient
 * within rounding of 0 may flip its entry's move). */
function farFraction(a: Float32Array, b: Float32Array, tol: number): number {
  let far = 0;
  for (let i = 0; i < a.length; i++) if (!(Math.abs(a[i] - b[i]) <= tol)) far++;
  return far / a.length;
}

describe.skipIf(noGpu)("matmul scale uniform vs the reference", () => {
  let ctx: GpuContext;
  beforeAll(async () => {
    ctx = await GpuContext.create();
  });
  afterAll(() => ctx?.destroy());

  it.each([
    [false, false, false],
    [true, false, true],
    [false, true, true],
  ])("tiled and few-row kernels: transA %s, transB %s, accumulate %s, scale 0.37", async (transA, transB, accumulate) => {
    const rng = new Rng(transA ? 1 : transB ? 2 : 3);
    for (const [M, K, N] of [
      [5, 7, 3],
      [70, 33, 19],
    ]) {
      const a = randn(rng, M * K);
      const b = randn(rng, K * N);
      const c0 = randn(rng, M * N);
      const A = transA ? transpose(a, M, K) : a;
      const B = transB ? transpose(b, K, N) : b;
      const want = ops.matmul(a, b, { m: M, k: K, n: N }).map((x, i) => (accumulate ? c0[i] : 0) + 0.37 * x);
      const C = ctx.upload(c0);
      matmul(ctx, ctx.upload(A), ctx.upload(B), C, { M, K, N, transA, transB, accumulate, scale: 0.37 });
      expect(maxRelError(await ctx.read(C), want)).toBeLessThan(2e-6);
      if (!transA) {
        const C2 = ctx.upload(c0);
        matmulRows(ctx, ctx.upload(a), ctx.upload(B), C2, { M, K, N, transB, accumulate, scale: 0.37 });
        expect(maxRelError(await ctx.read(C2), want)).toBeLessThan(2e-6);
      }
    }
  });
});

describe.skipIf(noGpu)("GpuPolicyTrainer with a LoRA adapter vs the CPU reference", { timeout: 300_000 }, () => {
  let ctx: GpuContext;
  beforeAll(async () => {
    ctx = await GpuContext.create();
  });
  afterAll(() => ctx?.destroy());

  it.each(CASES)("%s: log-probs, entropies and PPO adapter gradients equal the reference", async (_name, config, lora) => {
    const base = randomBase(config, 5);
    const adapter = randomAdapter(config, lora, 6);
    const rng = new Rng(7);
    const batch = makeBatch(rng, config.vocab_size, 5);
    const gpu = await GpuPolicyTrainer.create({ config, lora: { config: lora, base, adapter }, context: ctx });
    try {
      const got = await gpu.logProbs(batch, { microBatchSize: 2 });
      const want = forward(config, base, batch, { lora: { config: lora, params: adapter } });
      expect(maxRelError(got.log_probs, responseCols(want.logprob, batch))).toBeLessThan(2e-5);
      expect(maxRelError(got.entropy, responseCols(want.entropy, batch))).toBeLessThan(2e-5);
      // the adapter matters: the base alone gives other log-probs
      const baseOnly = responseCols(forward(config, base, batch).logprob, batch);
      expect(maxRelError(got.log_probs, baseOnly)).toBeGreaterThan(1e-2);

      const old = got.log_probs.map((x) => x + 0.3 * rng.normal());
      const adv = randomAdvantages(rng, batch.n * batch.R);
      const ref = got.log_probs.map((x) => x + 0.2 * rng.normal());
      const options: PolicyStepOptions = { microBatchSize: 2, entropyCoeff: 0.01, klLossCoef: 0.1, refLogProbs: ref, lr: 0 };
      const metrics = await gpu.policyStep(batch, adv, old, options);
      const r = referenceGradients(config, base, batch, adv, old, options, { config: lora, adapter });
      const grads = await gpu.lastGradients();
      expect(grads.length).toBe(loraParamCount(config, lora));
      expect(maxRelError(grads, r.grads)).toBeLessThan(1e-4);
      expect(metrics.loss).toBeCloseTo(r.loss.loss, 5);
      expect(metrics.clip_frac).toBeCloseTo(r.loss.clip_frac, 6);
      expect(metrics.approx_kl).toBeCloseTo(r.loss.approx_kl, 5);
      let ss = 0;
      for (const g of r.grads) ss += g * g;
      expect(metrics.grad_norm).toBeCloseTo(Math.sqrt(ss), 4);
    } finally {
      gpu.destroy();
    }
  });

  it.each(CASES)(
    "%s: PPO and SFT steps move the adapter like the CpuTrainer's, with the same metrics and state",
    async (_n, config, lora) => {
      const base = randomBase(config, 11);
      const adapter = randomAdapter(config, lora, 12);
      const rng = new Rng(13);
      const batch = makeBatch(rng, config.vocab_size, 4);
      const opts = { lr: 1e-2, maxGradNorm: 0.1 };
      const gpu = await GpuPolicyTrainer.create({ config, ...opts, lora: { config: lora, base, adapter }, context: ctx });
      const cpu = new CpuTrainer({ config, ...opts, lora: { config: lora, base, adapter } });
      try {
        const old = (await cpu.logProbs(batch)).log_probs.map((x) => x + 0.2 * rng.normal());
        const ref = (await cpu.logProbs(batch, { baseOnly: true })).log_probs;
        const adv = randomAdvantages(rng, batch.n * batch.R);
        const options: PolicyStepOptions = { microBatchSize: 3, klLossCoef: 0.05, klLossType: "low_var_kl", refLogProbs: ref };
        for (const step of [
          async (t: GpuPolicyTrainer | CpuTrainer) => t.policyStep(batch, adv, old, options),
          async (t: GpuPolicyTrainer | CpuTrainer) => t.sftStep(batch, { microBatchSize: 2 }),
        ]) {
          const mg = await step(gpu);
          const mc = await step(cpu);
          for (const k of ["loss", "pg_loss", "clip_frac", "clip_frac_lower", "approx_kl", "entropy"] as const)
            expect(mg[k], k).toBeCloseTo(mc[k], 5);
          expect(mg.grad_norm).toBeCloseTo(mc.grad_norm, 4);
          expect(mg.grad_norm).toBeGreaterThan(opts.maxGradNorm); // clipping was exercised
          expect(mg.step).toBe(mc.step);
          const sg = await gpu.getState();
          const sc = await cpu.getState();
          expect(sg.lora).toEqual(sc.lora);
          expect(sg.params.length).toBe(sc.params.length);
          expect(farFraction(sg.params, sc.params, 1e-5)).toBeLessThan(0.01);
          expect(farFraction(sg.optimizer.v, sc.optimizer.v, 1e-9)).toBeLessThan(0.01);
          expect(maxRelError(sg.optimizer.m, sc.optimizer.m)).toBeLessThan(1e-3);
        }
      } finally {
        gpu.destroy();
      }
    },
  );

  it("a bf16 base: equals the CPU trainer on the bf16-rounded base, and stays within 1e-3 of the float32 base", async () => {
    const config = QWEN3;
    const lora = ALL_TARGETS;
    const base = randomBase(config, 21);
    // what the GPU reads: matrices rounded to bf16, norms and biases float32
    const rounded = base.slice();
    for (const s of paramLayout(config))
      if (s.shape.length === 2) rounded.set(roundWeights(base.subarray(s.offset, s.offset + s.size), "bf16"), s.offset);
    const adapter = randomAdapter(config, lora, 22);
    const rng = new Rng(23);
    const batch = makeBatch(rng, config.vocab_size, 4);
    const gpu = await GpuPolicyTrainer.create({
      config,
      lr: 1e-2,
      lora: { config: lora, base, adapter },
      weightFormat: "bf16",
      context: ctx,
    });
    try {
      const onRounded = new CpuTrainer({ config, lr: 1e-2, lora: { config: lora, base: rounded, adapter } });
      const onF32 = new CpuTrainer({ config, lr: 1e-2, lora: { config: lora, base, adapter } });
      const got = await gpu.logProbs(batch);
      expect(maxRelError(got.log_probs, (await onRounded.logProbs(batch)).log_probs)).toBeLessThan(2e-5);
      const vsF32 = maxRelError(got.log_probs, (await onF32.logProbs(batch)).log_probs);
      console.log(`[lora bf16 base] log-prob max relative difference to the float32 base: ${vsF32.toExponential(2)}`);
      expect(vsF32).toBeLessThan(1e-3);
      expect(vsF32).toBeGreaterThan(0); // the rounding is real
      const old = got.log_probs;
      const adv = randomAdvantages(rng, batch.n * batch.R);
      const mg = await gpu.policyStep(batch, adv, old);
      const mr = await onRounded.policyStep(batch, adv, old);
      const mf = await onF32.policyStep(batch, adv, old);
      expect(mg.loss).toBeCloseTo(mr.loss, 5);
      expect(mg.grad_norm).toBeCloseTo(mr.grad_norm, 4);
      const normDiff = Math.abs(mg.grad_norm - mf.grad_norm) / mf.grad_norm;
      console.log(`[lora bf16 base] grad-norm relative difference to the float32 base: ${normDiff.toExponential(2)}`);
      expect(normDiff).toBeLessThan(1e-2);
      const pg = (await gpu.getState()).params;
      expect(farFraction(pg, (await onRounded.getState()).params, 1e-5)).toBeLessThan(0.01);
    } finally {
      gpu.destroy();
    }
  });

  it("step 0 (lora_b zero) gives exactly the base model's log-probs; baseOnly stays the base after steps", async () => {
    const config = QWEN3;
    const base = randomBase(config, 31);
    const rng = new Rng(32);
    const batch = makeBatch(rng, config.vocab_size, 4);
    const full = await GpuPolicyTrainer.create({ config, params: base, context: ctx });
    const gpu = await GpuPolicyTrainer.create({ config, lr: 1e-2, lora: { config: ALL_TARGETS, base, seed: 3 }, context: ctx });
    try {
      expect((await gpu.getState()).params).toEqual(initLora(config, ALL_TARGETS, 3));
      const want = await full.logProbs(batch, { microBatchSize: 3 });
      const step0 = await gpu.logProbs(batch, { microBatchSize: 3 });
      expect(step0.log_probs).toEqual(want.log_probs);
      expect(step0.entropy).toEqual(want.entropy);
      expect((await gpu.logProbs(batch, { baseOnly: true })).log_probs).toEqual(want.log_probs);
      const adv = randomAdvantages(rng, batch.n * batch.R);
      for (let s = 0; s < 2; s++) await gpu.policyStep(batch, adv, step0.log_probs);
      const after = await gpu.logProbs(batch);
      expect(maxRelError(after.log_probs, want.log_probs)).toBeGreaterThan(1e-3);
      // the base was never written: baseOnly is still exactly the base model
      expect((await gpu.logProbs(batch, { baseOnly: true, microBatchSize: 3 })).log_probs).toEqual(want.log_probs);
      // and the adapter alone carries the change: the CPU reference with the trained adapter agrees
      const adapter = (await gpu.getState()).params;
      const ref = forward(config, base, batch, { lora: { config: ALL_TARGETS, params: adapter } });
      expect(maxRelError(after.log_probs, responseCols(ref.logprob, batch))).toBeLessThan(2e-5);
    } finally {
      full.destroy();
      gpu.destroy();
    }
  });

  it.each([
    ["full fine-tuning", false],
    ["LoRA", true],
  ] as const)("activation checkpointing gives bit-identical gradients and steps (%s)", async (_n, withLora) => {
    const config = QWEN3;
    const base = randomBase(config, 41);
    const rng = new Rng(42);
    const batch = makeBatch(rng, config.vocab_size, 5);
    const adv = randomAdvantages(rng, batch.n * batch.R);
    const make = (recomputeActivations: boolean) =>
      GpuPolicyTrainer.create({
        config,
        lr: 1e-2,
        context: ctx,
        recomputeActivations,
        ...(withLora ? { lora: { config: ALL_TARGETS, base, adapter: randomAdapter(config, ALL_TARGETS, 43) } } : { params: base }),
      });
    const plain = await make(false);
    const ckpt = await make(true);
    try {
      const old = (await plain.logProbs(batch)).log_probs;
      expect((await ckpt.logProbs(batch)).log_probs).toEqual(old);
      // micro-batches of 2 rows go through the tiled matmul, of 1 row (<= 16 tokens) through the few-rows one
      for (const microBatchSize of [2, 1]) {
        const options = { microBatchSize, entropyCoeff: 0.01 };
        const a = await plain.policyStep(batch, adv, old, options);
        const b = await ckpt.policyStep(batch, adv, old, options);
        expect(b.loss).toBe(a.loss);
        expect(b.grad_norm).toBe(a.grad_norm);
        const ga = await plain.lastGradients();
        expect(ga.some((x) => x !== 0)).toBe(true);
        expect(await ckpt.lastGradients()).toEqual(ga);
      }
      expect((await ckpt.getState()).params).toEqual((await plain.getState()).params);
    } finally {
      plain.destroy();
      ckpt.destroy();
    }
  });

  it("state: getState/setState carry the adapter and its optimizer; another LoRA config is refused", async () => {
    const config = LLAMA;
    const base = randomBase(config, 51);
    const rng = new Rng(52);
    const batch = makeBatch(rng, config.vocab_size, 3);
    const adv = randomAdvantages(rng, batch.n * batch.R);
    const a = await GpuPolicyTrainer.create({ config, lr: 1e-2, lora: { config: QV, base, seed: 1 }, context: ctx });
    const b = await GpuPolicyTrainer.create({ config, lr: 1e-2, lora: { config: QV, base, seed: 2 }, context: ctx });
    const other = await GpuPolicyTrainer.create({ config, lora: { config: { ...QV, r: 2 }, base }, context: ctx });
    const full = await GpuPolicyTrainer.create({ config, params: base, context: ctx });
    try {
      const old = (await a.logProbs(batch)).log_probs;
      await a.policyStep(batch, adv, old);
      const state = await a.getState();
      expect(state.lora).toEqual(QV);
      expect(a.loraConfig).toEqual(QV);
      expect(full.loraConfig).toBeNull();
      expect(state.optimizer.step).toBe(1);
      expect(state.params.length).toBe(loraParamCount(config, QV));
      await b.setState(state);
      const ma = await a.policyStep(batch, adv, old);
      const mb = await b.policyStep(batch, adv, old);
      expect(mb.step).toBe(2);
      expect(mb.loss).toBe(ma.loss);
      expect((await b.getState()).params).toEqual((await a.getState()).params);
      await expect(other.setState(state)).rejects.toThrow(/different LoRA config/);
      await expect(full.setState(state)).rejects.toThrow(ValidationError);
      await expect(a.setState(await full.getState())).rejects.toThrow(/different LoRA config/);
    } finally {
      for (const t of [a, b, other, full]) t.destroy();
    }
  });

  it("refuses bad input with a ValidationError naming the field", async () => {
    const config = LLAMA;
    const base = randomBase(config, 61);
    await expect(
      GpuPolicyTrainer.create({ config, lora: { config: QV, base, adapter: new Float32Array(5) }, context: ctx }),
    ).rejects.toThrow(expect.objectContaining({ issues: [expect.objectContaining({ path: ["lora"] })] }));
    await expect(GpuPolicyTrainer.create({ config, params: base, weightFormat: "bf16", context: ctx })).rejects.toThrow(/inference/);
    await expect(
      GpuPolicyTrainer.create({ config, lora: { config: { r: 0, alpha: 1, targetModules: ["q_proj"] }, base }, context: ctx }),
    ).rejects.toThrow(ValidationError);
    await expect(GpuPolicyTrainer.create({ config, lora: { config: QV, base: base.subarray(1) }, context: ctx })).rejects.toThrow(
      ValidationError,
    );
  });

  it("createPolicyTrainer passes lora to either backend; WebGPU-only options are refused for the CPU", async () => {
    const config = LLAMA;
    const base = randomBase(config, 71);
    const lora = { config: QV, base, seed: 4 };
    const batch = makeBatch(new Rng(72), config.vocab_size, 2);
    const cpu = await createPolicyTrainer({ config, backend: "cpu", lora });
    const gpu = await createPolicyTrainer({ config, backend: "webgpu", context: ctx, lora, recomputeActivations: true });
    try {
      expect(cpu.backend).toBe("cpu");
      expect(gpu.backend).toBe("webgpu");
      expect((await cpu.getState()).lora).toEqual(QV);
      expect((await gpu.getState()).params).toEqual((await cpu.getState()).params);
      const mc = await cpu.sftStep(batch);
      const mg = await gpu.sftStep(batch);
      expect(mg.loss).toBeCloseTo(mc.loss, 5);
      await expect(createPolicyTrainer({ config, backend: "cpu", lora, recomputeActivations: true })).rejects.toThrow(
        /recomputeActivations is WebGPU-only/,
      );
      await expect(createPolicyTrainer({ config, backend: "cpu", lora, weightFormat: "bf16" })).rejects.toThrow(/weightFormat/);
    } finally {
      (gpu as GpuPolicyTrainer).destroy();
    }
  });
});

describe.skipIf(noGpu)("WebGPU generation with a LoRA adapter", { timeout: 300_000 }, () => {
  it.each([true, false])(
    "greedy generations equal the CPU engine's (KV cache %s); a new adapter uploads the adapter alone",
    async (kvCache) => {
      const config = LLAMA;
      // weights far from init scale, so greedy tokens vary and an adapter changes them
      const rng = new Rng(81);
      const base = randn(rng, paramCount(config), 0.4);
      for (const sp of paramLayout(config)) if (sp.shape.length === 1) base.fill(1, sp.offset, sp.offset + sp.size);
      const adapters = [82, 83].map((seed) => ({ config: QV, params: randn(new Rng(seed), loraParamCount(config, QV), 0.4) }));
      const requests: GenerationRequest[] = [
        { prompt: [3, 5, 7], maxTokens: 9, temperature: 0, stopTokenIds: [] },
        { prompt: [11, 2, 9, 30, 4, 8], maxTokens: 6, temperature: 0, stopTokenIds: [] },
        { prompt: [1], maxTokens: 12, temperature: 0, stopTokenIds: [] },
      ];
      const engine = await GpuGenerationEngine.create({ kvCache });
      const ctx = engine.ctx;
      // the names of the buffers written (parameter buffers carry their tensor's name)
      const names = new Set<string>();
      const write = ctx.write.bind(ctx);
      ctx.write = (buffer, data, offset) => {
        if (buffer.label) names.add(buffer.label);
        write(buffer, data, offset);
      };
      const baseNames = new Set(paramLayout(config).map((sp) => sp.name));
      const wroteBase = (): boolean => [...names].some((n) => baseNames.has(n));
      const same = async (adapter?: (typeof adapters)[number]) => {
        const got = await engine.generate(config, base, requests, undefined, adapter);
        const want = await cpuGenerationEngine.generate(config, base, requests, undefined, adapter);
        got.forEach((g, i) => {
          expect(g.tokenIds).toEqual(want[i].tokenIds);
          expect(maxRelError(g.logprobs, want[i].logprobs)).toBeLessThan(1e-4);
        });
        return got.map((g) => g.tokenIds);
      };
      try {
        const withFirst = await same(adapters[0]);
        expect(wroteBase()).toBe(true); // the spy sees the first upload
        expect(names.has("layers.1.wv.lora_b")).toBe(true);
        expect(engine.adapterBytes).toBe(4 * loraParamCount(config, QV));
        names.clear();
        const withSecond = await same(adapters[1]);
        // the adapter was uploaded again, the base was not
        expect(names.has("layers.0.wq.lora_a")).toBe(true);
        expect(wroteBase()).toBe(false);
        names.clear();
        await same(adapters[1]); // the same array again: neither is uploaded
        expect([...names].filter((n) => n.includes("lora_"))).toEqual([]);
        expect(wroteBase()).toBe(false);
        const plain = await same();
        expect(wroteBase()).toBe(false);
        expect(engine.adapterBytes).toBe(0);
        // an adapter of another shape replaces the old one's buffers
        const other = { config: ALL_TARGETS, params: randomAdapter(config, ALL_TARGETS, 84) };
        await same(other);
        // each adapter changes what the model says (so equality above is not the base twice)
        expect(withFirst).not.toEqual(plain);
        expect(withSecond).not.toEqual(withFirst);
      } finally {
        engine.destroy();
        ctx.destroy();
      }
    },
  );
});
