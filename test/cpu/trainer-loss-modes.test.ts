/** The CPU trainer with each policy loss mode (docs/training.md#the-ppo-loss): its step equals the loss's
 * gradient through the reference backward, and micro-batching changes nothing, clip_cov and kl_cov included
 * (their tokens are picked over the whole step). */
import { describe, expect, it } from "vitest";
import { CpuTrainer } from "../../src/cpu/trainer.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import type { ModelConfig } from "../../src/model/config.ts";
import type { PolicyLossMode, PolicyStepOptions } from "../../src/model/train-types.ts";
import { makeBatch, randomAdvantages, referenceGradients } from "../gpu/policy-reference.ts";

const config: ModelConfig = {
  vocab_size: 37,
  d_model: 16,
  n_layers: 2,
  n_heads: 4,
  n_kv_heads: 2,
  d_ff: 24,
  max_seq_len: 32,
  rope_theta: 10000,
  norm_eps: 1e-5,
  tie_embeddings: true,
};

const MODES: PolicyLossMode[] = ["vanilla", "gspo", "gpg", "clip_cov", "kl_cov", "cispo"];

describe("CpuTrainer loss modes", () => {
  it.each(MODES)("%s: micro-batches give the step of one batch, and the loss of src/model/ppo-loss.ts", async (lossMode) => {
    const rng = new Rng(3 + MODES.indexOf(lossMode));
    const batch = makeBatch(rng, config.vocab_size, 5);
    const params = initParams(config, 4);
    const a = new CpuTrainer({ config, params, lr: 1e-3, ops: "reference" });
    const b = new CpuTrainer({ config, params, lr: 1e-3, ops: "reference" });
    const { log_probs } = await a.logProbs(batch);
    const old = log_probs.map((x) => x + 0.3 * rng.normal());
    const adv = randomAdvantages(rng, batch.n * batch.R);
    const options: PolicyStepOptions = {
      lossMode,
      lossAggMode: "seq-mean-token-mean",
      entropyCoeff: 0.01,
      clipCovRatio: 0.2,
      clipCovLb: 0,
      klCovRatio: 0.2,
    };
    const want = referenceGradients(config, params, batch, adv, old, options);
    const ma = await a.policyStep(batch, adv, old, options);
    const mb = await b.policyStep(batch, adv, old, { ...options, microBatchSize: 2 });
    for (const m of [ma, mb]) {
      expect(m.loss).toBeCloseTo(want.loss.loss, 5);
      expect(m.pg_loss).toBeCloseTo(want.loss.pg_loss, 5);
      expect(m.clip_frac).toBeCloseTo(want.loss.clip_frac, 6);
      expect(m.approx_kl).toBeCloseTo(want.loss.approx_kl, 5);
      let ss = 0;
      for (const g of want.grads) ss += g * g;
      expect(m.grad_norm).toBeCloseTo(Math.sqrt(ss), 4);
    }
    if (lossMode === "clip_cov") expect(ma.clip_frac).toBeGreaterThan(0);
    const pa = (await a.getState()).params;
    const pb = (await b.getState()).params;
    let worst = 0;
    for (let i = 0; i < pa.length; i++) worst = Math.max(worst, Math.abs(pa[i] - pb[i]));
    expect(worst).toBeLessThan(1e-6);
  });
});
