import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GpuContext } from "../../src/gpu/context.ts";
import { METRIC_COLUMNS, ppoLoss, type PpoParams } from "../../src/gpu/kernels/ppo-loss.ts";
import { columnSums } from "../../src/gpu/kernels/reduce.ts";
import { aggWeights, normFromMask, ppoPolicyLoss } from "../../src/model/ppo-loss.ts";
import { KL_ALIASES } from "../../src/wasm/types.ts";
import { Rng } from "../../src/model/init.ts";
import type { KlLossType, LossAggMode } from "../../src/model/train-types.ts";
import { maxRelError, noGpu } from "./gpu-env.ts";

const C = METRIC_COLUMNS.length;
const col = (name: (typeof METRIC_COLUMNS)[number]): number => METRIC_COLUMNS.indexOf(name);

describe.skipIf(noGpu)("PPO loss kernel vs src/wasm/reference/ppo-loss.ts", { timeout: 180_000 }, () => {
  let ctx: GpuContext;
  beforeAll(async () => {
    ctx = await GpuContext.create();
  });
  afterAll(() => ctx?.destroy());

  it.each([
    ["token-mean", "low_var_kl"],
    ["seq-mean-token-sum", "kl"],
    ["seq-mean-token-mean", "abs"],
    ["seq-mean-token-sum-norm", "mse"],
  ] as Array<[LossAggMode, KlLossType]>)("%s with %s: per-token gradients and metric sums", async (mode, klKind) => {
    const rng = new Rng(17);
    const rows = 5;
    const cols = 13;
    const n = rows * cols;
    const mask = Float32Array.from({ length: n }, (_, k) => (k % cols < 3 + (Math.floor(k / cols) % 4) * 3 ? 1 : 0));
    const old = Float32Array.from({ length: n }, () => -2 + rng.normal());
    // Ratios inside and outside the clip range, a tie (logp == old) and an extreme delta beyond the ±20 clamp.
    const logp = old.map((x, k) => (k % 7 === 0 ? x : x + 0.5 * rng.normal()));
    logp[1] = old[1] + 25;
    const adv = Float32Array.from({ length: n }, (_, k) => (k % 5 === 0 ? -2 : rng.normal()));
    const entropy = Float32Array.from({ length: n }, () => Math.abs(rng.normal()));
    const ref = logp.map((x, k) => (k % 11 === 0 ? x : x + 0.3 * rng.normal()));
    ref[2] = logp[2] + 30; // low_var_kl clamps
    const options = {
      clipRatio: 0.2,
      clipRatioHigh: 0.28,
      clipRatioC: 3,
      lossAggMode: mode,
      entropyCoeff: 0.01,
      klLossCoef: 0.1,
      klLossType: klKind,
    };
    const norm = normFromMask(mask, rows, cols);
    const want = ppoPolicyLoss(
      { rows, cols, logProbs: logp, oldLogProbs: old, advantages: adv, responseMask: mask, entropy, refLogProbs: ref },
      options,
      norm,
    );
    const weight = Float32Array.from(aggWeights(mask, rows, cols, mode, norm));
    const up = (a: Float32Array): GPUBuffer => ctx.upload(a);
    const bufs = {
      logprob: up(logp),
      oldLogprob: up(old),
      advantages: up(adv),
      entropy: up(entropy),
      refLogprob: up(ref),
      weight: up(weight),
      mask: up(mask),
      dlogprob: ctx.alloc(n),
      dentropy: ctx.alloc(n),
      metrics: ctx.alloc(n * C),
    };
    const params: PpoParams = {
      clipLow: 0.2,
      clipHigh: 0.28,
      clipC: 3,
      entropyCoeff: 0.01,
      klCoef: 0.1,
      klKind: KL_ALIASES[klKind],
      hasRef: true,
    };
    ppoLoss(ctx, bufs, n, params);
    const sums = ctx.alloc(C);
    columnSums(ctx, bufs.metrics, sums, n, C);
    expect(maxRelError(await ctx.read(bufs.dlogprob), want.dLogProbs)).toBeLessThan(1e-5);
    expect(maxRelError(await ctx.read(bufs.dentropy), want.dEntropy)).toBeLessThan(1e-6);
    const s = await ctx.read(sums);
    const meanScale = 1 / (norm.tokens + 1e-8);
    expect(s[col("pg")]).toBeCloseTo(want.pg_loss, 5);
    expect(s[col("entropy")]).toBeCloseTo(want.entropy_loss, 5);
    expect(s[col("kl")]).toBeCloseTo(want.kl_loss, 4);
    expect(s[col("clipped")] * meanScale).toBeCloseTo(want.clip_frac, 6);
    expect(s[col("clipped_lower")] * meanScale).toBeCloseTo(want.clip_frac_lower, 6);
    expect(want.clip_frac_lower).toBeGreaterThan(0);
    expect(s[col("neg_log_ratio")] * meanScale).toBeCloseTo(want.approx_kl, 5);
    expect(s[col("mask")]).toBe(norm.tokens);
  });
});
