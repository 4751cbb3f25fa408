import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GpuContext } from "../../src/gpu/context.ts";
import { METRIC_COLUMNS, packLossInputs, ppoLoss, ppoParams, seqLogRatio } from "../../src/gpu/kernels/ppo-loss.ts";
import { columnSums } from "../../src/gpu/kernels/reduce.ts";
import {
  aggWeights,
  covSelection,
  needsCovSelection,
  normFromMask,
  pgAggMode,
  ppoPolicyLoss,
  resolveLossOptions,
  type PpoLossResult,
} from "../../src/model/ppo-loss.ts";
import { Rng } from "../../src/model/init.ts";
import type { KlLossType, LossAggMode, PolicyLossMode, PolicyLossOptions } from "../../src/model/train-types.ts";
import { maxRelError, noGpu } from "./gpu-env.ts";

const C = METRIC_COLUMNS.length;
const col = (name: (typeof METRIC_COLUMNS)[number]): number => METRIC_COLUMNS.indexOf(name);

interface Case {
  rows: number;
  cols: number;
  logp: Float32Array;
  old: Float32Array;
  adv: Float32Array;
  mask: Float32Array;
  entropy: Float32Array;
  ref: Float32Array;
}

/** Ratios inside and outside the clip range, a tie (logp == old), an extreme delta beyond the ±20 clamp
 * (kept out of the modes without that clamp, whose float32 ratio would overflow), and rows of different lengths. */
function makeCase(seed: number, extreme: boolean): Case {
  const rng = new Rng(seed);
  const rows = 5;
  const cols = 13;
  const n = rows * cols;
  const mask = Float32Array.from({ length: n }, (_, k) => (k % cols < 3 + (Math.floor(k / cols) % 4) * 3 ? 1 : 0));
  const old = Float32Array.from({ length: n }, () => -2 + rng.normal());
  const logp = old.map((x, k) => (k % 7 === 0 ? x : x + 0.5 * rng.normal()));
  if (extreme) logp[1] = old[1] + 25;
  // advantages in (-2, 2) with every fifth token at -2; covariances with log-probs land inside clip_cov's band
  const adv = Float32Array.from({ length: n }, (_, k) => (k % 5 === 0 ? -2 : rng.normal()));
  const entropy = Float32Array.from({ length: n }, () => Math.abs(rng.normal()));
  const ref = logp.map((x, k) => (k % 11 === 0 ? x : x + 0.3 * rng.normal()));
  ref[2] = logp[2] + 30; // low_var_kl clamps
  return { rows, cols, logp, old, adv, mask, entropy, ref };
}

function lossInput(c: Case) {
  return {
    rows: c.rows,
    cols: c.cols,
    logProbs: c.logp,
    oldLogProbs: c.old,
    advantages: c.adv,
    responseMask: c.mask,
    entropy: c.entropy,
    refLogProbs: c.ref,
  };
}

describe.skipIf(noGpu)("PPO loss kernel vs src/model/ppo-loss.ts", { timeout: 180_000 }, () => {
  let ctx: GpuContext;
  beforeAll(async () => {
    ctx = await GpuContext.create();
  });
  afterAll(() => ctx?.destroy());

  /** The kernel's outputs for `c` under `options`, with the host's inputs as the GPU trainer builds them. */
  async function runKernel(c: Case, options: PolicyLossOptions, selected?: Uint8Array) {
    const o = resolveLossOptions(options);
    const { rows, cols } = c;
    const n = rows * cols;
    const norm = normFromMask(c.mask, rows, cols);
    const weight = Float32Array.from(aggWeights(c.mask, rows, cols, o.lossAggMode, norm));
    const pgWeight = Float32Array.from(aggWeights(c.mask, rows, cols, pgAggMode(o), norm));
    const inputs = packLossInputs(n, {
      oldLogprob: c.old,
      advantage: c.adv,
      refLogprob: c.ref,
      weight,
      pgWeight,
      mask: c.mask,
      selected,
    });
    const bufs = {
      logprob: ctx.upload(c.logp),
      entropy: ctx.upload(c.entropy),
      inputs: ctx.upload(inputs),
      seqLogRatio: ctx.alloc(rows),
      dlogprob: ctx.alloc(n),
      dentropy: ctx.alloc(n),
      metrics: ctx.alloc(n * C),
    };
    const params = ppoParams(o, true);
    if (o.lossMode === "gspo") seqLogRatio(ctx, { logprob: bufs.logprob, inputs: bufs.inputs, seqLogRatio: bufs.seqLogRatio }, rows, cols);
    ppoLoss(ctx, bufs, { rows, cols }, params);
    const sums = ctx.alloc(C);
    columnSums(ctx, bufs.metrics, sums, n, C);
    const out = {
      dlogprob: await ctx.read(bufs.dlogprob),
      dentropy: await ctx.read(bufs.dentropy),
      sums: await ctx.read(sums),
      meanScale: 1 / (norm.tokens + 1e-8),
      tokens: norm.tokens,
    };
    for (const b of [...Object.values(bufs), sums]) b.destroy();
    return out;
  }

  function expectMatches(got: Awaited<ReturnType<typeof runKernel>>, want: PpoLossResult): void {
    expect(maxRelError(got.dlogprob, want.dLogProbs)).toBeLessThan(1e-5);
    expect(maxRelError(got.dentropy, want.dEntropy)).toBeLessThan(1e-6);
    const s = got.sums;
    expect(s[col("pg")]).toBeCloseTo(want.pg_loss, 5);
    expect(s[col("entropy")]).toBeCloseTo(want.entropy_loss, 5);
    expect(s[col("kl")]).toBeCloseTo(want.kl_loss, 4);
    expect(s[col("clipped")] * got.meanScale).toBeCloseTo(want.clip_frac, 6);
    expect(s[col("clipped_lower")] * got.meanScale).toBeCloseTo(want.clip_frac_lower, 6);
    expect(s[col("neg_log_ratio")] * got.meanScale).toBeCloseTo(want.approx_kl, 5);
    expect(s[col("mask")]).toBe(got.tokens);
  }

  it.each([
    ["token-mean", "low_var_kl"],
    ["seq-mean-token-sum", "kl"],
    ["seq-mean-token-mean", "abs"],
    ["seq-mean-token-sum-norm", "mse"],
  ] as Array<[LossAggMode, KlLossType]>)("vanilla, %s with %s: per-token gradients and metric sums", async (mode, klKind) => {
    const c = makeCase(17, true);
    const options = {
      clipRatio: 0.2,
      clipRatioHigh: 0.28,
      clipRatioC: 3,
      lossAggMode: mode,
      entropyCoeff: 0.01,
      klLossCoef: 0.1,
      klLossType: klKind,
    };
    const want = ppoPolicyLoss(lossInput(c), options);
    expect(want.clip_frac_lower).toBeGreaterThan(0);
    expectMatches(await runKernel(c, options), want);
  });

  const MODES: PolicyLossMode[] = ["gspo", "gpg", "clip_cov", "kl_cov", "cispo"];
  const AGG: LossAggMode[] = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"];
  it.each(MODES.flatMap((m) => AGG.map((a) => [m, a] as const)))(
    "%s, %s: per-token gradients and metric sums",
    async (lossMode, lossAggMode) => {
      const c = makeCase(29 + MODES.indexOf(lossMode), lossMode === "cispo");
      const options: PolicyLossOptions = {
        lossMode,
        lossAggMode,
        clipRatioHigh: 0.28,
        entropyCoeff: 0.01,
        klLossCoef: 0.1,
        klLossType: "low_var_kl",
        clipCovRatio: 0.1,
        clipCovLb: 0.1,
        klCovRatio: 0.1,
        ppoKlCoef: 0.5,
      };
      const input = lossInput(c);
      const selected = needsCovSelection(lossMode) ? covSelection(input, options, 3) : undefined;
      if (selected) expect(selected.reduce((s, x) => s + x, 0)).toBeGreaterThan(1);
      const want = ppoPolicyLoss({ ...input, covSelected: selected }, options);
      if (lossMode === "gspo" || lossMode === "cispo") expect(want.clip_frac).toBeGreaterThan(0);
      expectMatches(await runKernel(c, options, selected), want);
    },
  );
});
