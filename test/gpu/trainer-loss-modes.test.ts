/** The GPU trainer with each policy loss mode (docs/training.md#the-ppo-loss) against the CPU reference's
 * gradient, with micro-batches: gspo's row ratio on the device, clip_cov and kl_cov's whole-step selection. */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GpuContext } from "../../src/gpu/context.ts";
import { GpuPolicyTrainer } from "../../src/gpu/trainer.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import type { ModelConfig } from "../../src/model/config.ts";
import type { LossAggMode, PolicyLossMode, PolicyStepOptions } from "../../src/model/train-types.ts";
import { maxRelError, noGpu } from "./gpu-env.ts";
import { makeBatch, randomAdvantages, referenceGradients } from "./policy-reference.ts";

const config: ModelConfig = {
  vocab_size: 37,
  d_model: 24,
  n_layers: 2,
  n_heads: 4,
  n_kv_heads: 2,
  d_ff: 40,
  max_seq_len: 32,
  rope_theta: 10000,
  norm_eps: 1e-5,
  tie_embeddings: false,
};

describe.skipIf(noGpu)("GpuPolicyTrainer loss modes vs the CPU reference", { timeout: 180_000 }, () => {
  let ctx: GpuContext;
  beforeAll(async () => {
    ctx = await GpuContext.create();
  });
  afterAll(() => ctx?.destroy());

  it.each([
    ["gspo", "token-mean"],
    ["gpg", "seq-mean-token-sum"],
    ["clip_cov", "token-mean"],
    ["kl_cov", "seq-mean-token-sum-norm"],
    ["cispo", "seq-mean-token-mean"],
  ] as Array<[PolicyLossMode, LossAggMode]>)("%s (%s): gradient and metrics", async (lossMode, lossAggMode) => {
    const rng = new Rng(40);
    const batch = makeBatch(rng, config.vocab_size, 5);
    const params = initParams(config, 6);
    const gpu = await GpuPolicyTrainer.create({ config, params, context: ctx });
    const { log_probs } = await gpu.logProbs(batch);
    // per-row shifts too, so that gspo's row ratios leave the clip range on some rows
    const old = log_probs.map((x, k) => x + 0.3 * rng.normal() + 0.2 * (Math.floor(k / batch.R) - 2));
    const adv = randomAdvantages(rng, batch.n * batch.R);
    const ref = log_probs.map((x) => x + 0.2 * rng.normal());
    const options: PolicyStepOptions = {
      lossMode,
      lossAggMode,
      entropyCoeff: 0.01,
      klLossCoef: 0.05,
      refLogProbs: ref,
      clipCovRatio: 0.2,
      clipCovLb: 0,
      klCovRatio: 0.2,
      ppoKlCoef: 0.5,
      microBatchSize: 2,
      lr: 0,
    };
    const metrics = await gpu.policyStep(batch, adv, old, options);
    const want = referenceGradients(config, params, batch, adv, old, options);
    expect(maxRelError(await gpu.lastGradients(), want.grads)).toBeLessThan(1e-4);
    expect(metrics.loss).toBeCloseTo(want.loss.loss, 5);
    expect(metrics.pg_loss).toBeCloseTo(want.loss.pg_loss, 5);
    expect(metrics.entropy).toBeCloseTo(want.loss.entropy_loss, 4);
    expect(metrics.clip_frac).toBeCloseTo(want.loss.clip_frac, 6);
    expect(metrics.approx_kl).toBeCloseTo(want.loss.approx_kl, 5);
    if (lossMode !== "gpg" && lossMode !== "kl_cov") expect(metrics.clip_frac).toBeGreaterThan(0);
    gpu.destroy();
  });
});
