import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createCpuValueTrainer } from "../../src/cpu/value-trainer.ts";
import { GpuContext } from "../../src/gpu/context.ts";
import { GpuValueTrainer } from "../../src/gpu/value-trainer.ts";
import { resolveResponseMask } from "../../src/model/batch.ts";
import type { ModelConfig } from "../../src/model/config.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import type { LossAggMode } from "../../src/model/train-types.ts";
import { maxRelError, noGpu } from "./gpu-env.ts";
import { makeBatch } from "./policy-reference.ts";

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
    qkv_bias: !tie,
  };
}

describe.skipIf(noGpu)("GpuValueTrainer vs the CPU critic", { timeout: 180_000 }, () => {
  let ctx: GpuContext;
  beforeAll(async () => {
    ctx = await GpuContext.create();
  });
  afterAll(() => ctx?.destroy());

  it.each([
    [true, "token-mean", undefined],
    [false, "seq-mean-token-mean", 2],
  ] as const)(
    "values, a value step's metrics and the parameters after it equal the CPU critic's (tied %s, %s, micro-batch %s)",
    async (tie, mode: LossAggMode, micro) => {
      const config = tinyConfig(tie);
      const rng = new Rng(5);
      const batch = makeBatch(rng, config.vocab_size, 5);
      const policyParams = initParams(config, 2);
      const gpu = await GpuValueTrainer.create({ config, policyParams, seed: 4, lr: 1e-3, context: ctx });
      const cpu = createCpuValueTrainer({ config, policyParams, seed: 4, lr: 1e-3, ops: "reference" });
      const old = await cpu.values(batch);
      expect(maxRelError(await gpu.values(batch, { microBatchSize: 2 }), old)).toBeLessThan(2e-5);
      const mask = resolveResponseMask(batch);
      const returns = mask.map((m, k) => m * Math.sin(k));
      // a clip band tight enough to bite after the first step
      for (const cliprangeValue of [0.5, 0.01]) {
        const want = await cpu.valueStep(batch, returns, old, { lossAggMode: mode, cliprangeValue, microBatchSize: micro });
        const got = await gpu.valueStep(batch, returns, old, { lossAggMode: mode, cliprangeValue, microBatchSize: micro });
        expect(got.vf_loss / want.vf_loss).toBeCloseTo(1, 4);
        expect(got.vf_clipfrac).toBeCloseTo(want.vf_clipfrac, 6);
        expect(got.vpred_mean).toBeCloseTo(want.vpred_mean, 4);
        expect(got.grad_norm / want.grad_norm).toBeCloseTo(1, 4);
        expect(got.step).toBe(want.step);
        expect(got.skipped).toBe(false);
      }
      const [g, c] = [await gpu.getState(), await cpu.getState()];
      // Adam's steps are about lr * sign(g): allow a sign flip only where the gradient is ~0
      let far = 0;
      for (let i = 0; i < g.params.length; i++) if (Math.abs(g.params[i] - c.params[i]) > 1e-4) far++;
      expect(far / g.params.length).toBeLessThan(0.01);
      expect(maxRelError(g.optimizer.v, c.optimizer.v)).toBeLessThan(1e-6);
      expect(maxRelError(g.params.subarray(-config.d_model - 1), c.params.subarray(-config.d_model - 1))).toBeLessThan(1e-5);
      gpu.destroy();
      cpu.close();
    },
  );

  it("getState / setState round-trips between GPU critics and to the CPU critic", async () => {
    const config = tinyConfig(true);
    const batch = makeBatch(new Rng(9), config.vocab_size, 4);
    const a = await GpuValueTrainer.create({ config, seed: 1, lr: 1e-2, context: ctx });
    const returns = resolveResponseMask(batch);
    const old = await a.values(batch);
    await a.valueStep(batch, returns, old);
    const saved = await a.getState();
    const b = await GpuValueTrainer.create({ config, seed: 8, lr: 1e-2, context: ctx });
    await b.setState(saved);
    expect(await b.values(batch)).toEqual(await a.values(batch));
    const cpu = createCpuValueTrainer({ config, params: saved.params, optimizer: saved.optimizer, lr: 1e-2, ops: "reference" });
    expect(maxRelError(await cpu.values(batch), await a.values(batch))).toBeLessThan(2e-5);
    await expect(b.setState({ ...saved, params: saved.params.subarray(1) })).rejects.toThrow(/params has/);
    a.destroy();
    b.destroy();
  });
});
