/** The policy loss modes (docs/training.md#the-ppo-loss): hand-worked cases, verl's formulas on random batches
 * (test/model/ppo-loss-oracle.ts), gradients against finite differences, micro-batching, the entropy bonus and
 * the dual clip. */
import { describe, expect, it } from "vitest";
import { Rng } from "../../src/model/init.ts";
import type { LossAggMode, PolicyLossMode, PolicyLossOptions } from "../../src/model/train-types.ts";
import { aggWeights, covSelection, normFromMask, ppoPolicyLoss, resolveLossOptions, type PpoLossInput } from "../../src/model/ppo-loss.ts";
import { ValidationError } from "../../src/types/errors.ts";
import { maxScaledErr, randInt, randn } from "./helpers.ts";
import { ppoLossOracle, type RandPerm } from "./ppo-loss-oracle.ts";

const AGG: LossAggMode[] = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"];
const LOSS_MODES: PolicyLossMode[] = ["vanilla", "gspo", "gpg", "clip_cov", "kl_cov", "cispo"];
const E = Math.exp;
/** token-mean of a masked sum over N tokens: verl's masked_mean divides by N + 1e-8. */
const tokenMean = (sum: number, N: number): number => sum / (N + 1e-8);

/** A random batch: ratios inside and outside the clip range, some masked tokens, and with `rowAdvantages`
 * one advantage per row (GRPO's shape). */
function randomInput(rng: Rng, rowAdvantages = false): PpoLossInput & { logProbs: Float64Array; entropy: Float64Array } {
  const rows = randInt(rng, 1, 5);
  const cols = randInt(rng, 1, 8);
  const n = rows * cols;
  const old = Float64Array.from(randn(rng, n, 0.5), (v) => v - 1);
  const logp = Float64Array.from(old, (v) => v + rng.normal() * 0.5);
  const adv = randn(rng, n);
  if (rowAdvantages) for (let k = 0; k < n; k++) adv[k] = adv[Math.floor(k / cols) * cols];
  return {
    rows,
    cols,
    logProbs: logp,
    oldLogProbs: old,
    advantages: adv,
    responseMask: Array.from({ length: n }, () => (rng.uniform() < 0.8 ? 1 : 0)),
    entropy: randn(rng, n),
    refLogProbs: Float64Array.from(logp, (v) => v + rng.normal() * 0.3),
  };
}

const asRows = (a: ArrayLike<number>, rows: number, cols: number): number[][] =>
  Array.from({ length: rows }, (_, i) => Array.from(a).slice(i * cols, (i + 1) * cols));

describe("policy loss modes on cases worked by hand", () => {
  it("gspo: one ratio per row from the mean log-ratio, aggregated seq-mean-token-mean whatever lossAggMode says", () => {
    // row 0: log-ratios 0.1 and -0.3 -> mean -0.1 -> s = e^-0.1 = 0.904837 (inside [0.8, 1.2]), A = 1:
    //   loss -0.904837 per token; row 1: one token, log-ratio 0.5 -> s = e^0.5 = 1.648721, clipped to 1.2,
    //   A = 2: loss -2.4, no gradient. seq-mean-token-mean: (-0.904837 + -2.4) / 2 = -1.652419 (token-mean
    //   would give -1.403225). Gradient on row 0: weight 1/(2 tokens * 2 rows) = 0.25, times -A s.
    const r = ppoPolicyLoss(
      {
        rows: 2,
        cols: 2,
        logProbs: [-0.9, -1.3, -1.5, 5],
        oldLogProbs: [-1, -1, -2, 0],
        advantages: [1, 1, 2, 2],
        responseMask: [1, 1, 1, 0],
      },
      { lossMode: "gspo", lossAggMode: "token-mean" },
    );
    expect(r.pg_loss).toBeCloseTo((-E(-0.1) - 2.4) / 2, 12);
    expect(r.pg_loss).toBeCloseTo(-1.652419, 6);
    expect(r.dLogProbs[0]).toBeCloseTo(-0.25 * E(-0.1), 12);
    expect(r.dLogProbs[1]).toBeCloseTo(-0.25 * E(-0.1), 12);
    expect(Array.from(r.dLogProbs.slice(2))).toEqual([0, 0]);
    expect(r.clip_frac).toBeCloseTo(1 / 3, 7);
    expect(r.clip_frac_lower).toBe(0);
    // masked mean of old - new: (-0.1 + 0.3 - 0.5) / 3
    expect(r.approx_kl).toBeCloseTo(-0.1, 7);
  });

  it("gspo: the sequence ratio's value is stopped, so each token's gradient carries its own advantage", () => {
    // one row, log-ratios 0.1 and -0.3 -> s = e^-0.1; A = 1, 3; weight 1/2 each: gradients -s/2 and -3s/2.
    // (Differentiating through s instead would give both tokens (-s/2 - 3s/2) / 2 = -s.)
    const r = ppoPolicyLoss(
      { rows: 1, cols: 2, logProbs: [-0.9, -1.3], oldLogProbs: [-1, -1], advantages: [1, 3], responseMask: [1, 1] },
      { lossMode: "gspo" },
    );
    expect(r.dLogProbs[0]).toBeCloseTo(-E(-0.1) / 2, 12);
    expect(r.dLogProbs[1]).toBeCloseTo((-3 * E(-0.1)) / 2, 12);
    expect(r.pg_loss).toBeCloseTo(-2 * E(-0.1), 12);
  });

  it("gpg: -A logp, no ratio", () => {
    // token-mean over two tokens: (-(-0.5)(1) + -(-2)(-0.5)) / 2 = (0.5 - 1) / 2 = -0.25; gradient -A / 2
    const r = ppoPolicyLoss(
      { rows: 1, cols: 3, logProbs: [-0.5, -2, -1], oldLogProbs: [-0.7, -2, -1], advantages: [1, -0.5, 3], responseMask: [1, 1, 0] },
      { lossMode: "gpg" },
    );
    expect(r.pg_loss).toBeCloseTo(-0.25, 7);
    expect(Array.from(r.dLogProbs)).toEqual([tokenMean(-1, 2), tokenMean(0.5, 2), 0]);
    expect(r.clip_frac).toBe(0);
  });

  // A = [2, -2, 0.5, -0.5] (mean 0), logp = [1, -1, 0.2, 0.2] (mean 0.1):
  // cov = (A - 0)(logp - 0.1) = [1.8, 2.2, 0.05, -0.05].
  const covCase = (old: number[]): PpoLossInput => ({
    rows: 1,
    cols: 4,
    logProbs: [1, -1, 0.2, 0.2],
    oldLogProbs: old,
    advantages: [2, -2, 0.5, -0.5],
    responseMask: [1, 1, 1, 1],
  });

  it("clip_cov: the tokens with covariance in (lb, ub) lose their term and gradient", () => {
    // tokens 0 and 1 are in (1, 5); max(floor(0.5 * 4), 1) = 2 may be cut, so both are. Token 2 has ratio
    // e^0.1 = 1.105171 (inside the clip range): loss -0.5 * 1.105171; token 3 ratio 1: loss 0.5.
    // token-mean: (-0.552585 + 0.5) / 4 = -0.013146; gradients 0.25 * -A ratio.
    const r = ppoPolicyLoss(covCase([1, -1, 0.1, 0.2]), { lossMode: "clip_cov", clipCovRatio: 0.5 });
    expect(r.pg_loss).toBeCloseTo(tokenMean(-0.5 * E(0.1) + 0.5, 4), 15);
    expect(r.pg_loss).toBeCloseTo(-0.013146, 6);
    expect(Array.from(r.dLogProbs, (g) => g + 0)).toEqual([0, 0, tokenMean(-0.5 * E(0.1), 4), tokenMean(0.5, 4)]);
    expect(r.clip_frac).toBeCloseTo(0.5, 7);
    expect(r.approx_kl).toBeCloseTo(-0.1 / 4, 7);
    // vanilla on the same tokens: every gradient is there
    const v = ppoPolicyLoss(covCase([1, -1, 0.1, 0.2]), {});
    expect(v.dLogProbs[0]).toBeCloseTo(tokenMean(-2, 4), 15);
    expect(v.dLogProbs[1]).toBeCloseTo(tokenMean(2, 4), 15);
  });

  it("clip_cov: with fewer tokens to cut than candidates, a seeded uniform draw among the candidates", () => {
    // max(floor(0.25 * 4), 1) = 1 of the two candidates (tokens 0 and 1)
    const counts = [0, 0, 0, 0];
    for (let seed = 0; seed < 400; seed++) {
      const sel = covSelection(covCase([1, -1, 0.1, 0.2]), { lossMode: "clip_cov", clipCovRatio: 0.25 }, seed);
      sel.forEach((s, k) => {
        counts[k] += s;
      });
      expect(sel[0] + sel[1]).toBe(1);
    }
    expect(counts[2] + counts[3]).toBe(0);
    expect(counts[0]).toBeGreaterThan(150);
    expect(counts[1]).toBeGreaterThan(150);
    // a token the PPO clip already clips is no candidate: token 1's ratio e^-0.5 < 0.8 with A < 0
    const clipped = covSelection(covCase([1, -0.5, 0.1, 0.2]), { lossMode: "clip_cov", clipCovRatio: 0.5 });
    expect(Array.from(clipped)).toEqual([1, 0, 0, 0]);
  });

  it("kl_cov: the largest covariance gets + ppoKlCoef |logp - old|, no clipping anywhere", () => {
    // k = max(floor(4 * 0.25), 1) = 1: token 1 (cov 2.2). Its log-ratio 0.3 -> ratio e^0.3 = 1.349859 (no
    // clip): loss 2 * 1.349859 + 0.1 * 0.3 = 2.729718. Others ratio 1: -2, -0.5, 0.5.
    // token-mean (-2 + 2.729718 - 0.5 + 0.5) / 4 = 0.182430; token 1's gradient 0.25 (2 e^0.3 + 0.1 sign(0.3)).
    const r = ppoPolicyLoss(covCase([1, -1.3, 0.2, 0.2]), { lossMode: "kl_cov", klCovRatio: 0.25, ppoKlCoef: 0.1 });
    expect(r.pg_loss).toBeCloseTo(tokenMean(-2 + 2 * E(0.3) + 0.03, 4), 15);
    expect(r.pg_loss).toBeCloseTo(0.18243, 5);
    expect(r.dLogProbs[1]).toBeCloseTo(tokenMean(2 * E(0.3) + 0.1, 4), 15);
    expect([r.dLogProbs[0], r.dLogProbs[2], r.dLogProbs[3]]).toEqual([tokenMean(-2, 4), tokenMean(-0.5, 4), tokenMean(0.5, 4)]);
    // ppo_kl is the mean |logp - old|
    expect(r.approx_kl).toBeCloseTo(tokenMean(0.3, 4), 15);
    expect(r.clip_frac).toBe(0);
  });

  it("cispo: the clipped ratio weights -A logp without a gradient of its own, so clipped tokens still learn", () => {
    // log-ratios 0.5, 0.1 -> ratios 1.648721 (clipped to 1.2), 1.105171; A = 1, -1; logp -1, -2.
    // losses -1.2 * 1 * -1 = 1.2 and -1.105171 * -1 * -2 = -2.210342; token-mean -0.505171.
    // gradients 0.5 * -w A: -0.6 and 0.552585.
    const r = ppoPolicyLoss(
      { rows: 1, cols: 2, logProbs: [-1, -2], oldLogProbs: [-1.5, -2.1], advantages: [1, -1], responseMask: [1, 1] },
      { lossMode: "cispo" },
    );
    expect(r.pg_loss).toBeCloseTo(tokenMean(1.2 - 2 * E(0.1), 2), 15);
    expect(r.pg_loss).toBeCloseTo(-0.505171, 6);
    expect(r.dLogProbs[0]).toBeCloseTo(tokenMean(-1.2, 2), 15);
    expect(r.dLogProbs[1]).toBeCloseTo(tokenMean(E(0.1), 2), 15);
    expect(r.clip_frac).toBeCloseTo(0.5, 7);
    expect(r.approx_kl).toBeCloseTo(tokenMean(-0.6, 2), 15);
    // vanilla gives the clipped token no gradient
    expect(ppoPolicyLoss({ rows: 1, cols: 1, logProbs: [-1], oldLogProbs: [-1.5], advantages: [1], responseMask: [1] }).dLogProbs[0]).toBe(
      0,
    );
  });

  it("bad loss options are refused with the option named", () => {
    const one = { rows: 1, cols: 1, logProbs: [0], oldLogProbs: [0], advantages: [1], responseMask: [1] };
    const refused = (o: PolicyLossOptions, field: string) => {
      try {
        ppoPolicyLoss(one, o);
      } catch (e) {
        expect(e).toBeInstanceOf(ValidationError);
        expect((e as ValidationError).issues[0].path).toEqual([field]);
        return;
      }
      throw new Error(`accepted ${JSON.stringify(o)}`);
    };
    refused({ lossMode: "ppo" as PolicyLossMode }, "lossMode");
    refused({ lossMode: "clip_cov", clipCovRatio: 0 }, "clipCovRatio");
    refused({ lossMode: "kl_cov", klCovRatio: 1.5 }, "klCovRatio");
    expect(() => ppoPolicyLoss({ ...one, covSelected: [1, 0] }, { lossMode: "kl_cov" })).toThrow(/covSelected/);
  });
});

describe.each(LOSS_MODES)("loss mode %s", (lossMode) => {
  it.each(AGG)("loss and metrics equal verl's formulas on random batches (%s)", (lossAggMode) => {
    const rng = new Rng(1000 + LOSS_MODES.indexOf(lossMode) * 10 + AGG.indexOf(lossAggMode));
    let picked = 0;
    for (let trial = 0; trial < 8; trial++) {
      const input = randomInput(rng);
      const { rows, cols } = input;
      if (trial === 0) for (let t = 0; t < cols; t++) (input.responseMask as number[])[t] = 0; // an empty row
      const options: Required<PolicyLossOptions> = {
        ...resolveLossOptions(),
        lossMode,
        lossAggMode,
        clipRatioLow: 0.2,
        clipRatioHigh: 0.28,
        clipRatioC: 2.5,
        entropyCoeff: 0.01,
        klLossCoef: 0.1,
        klLossType: "low_var_kl",
        clipCovRatio: 0.2,
        clipCovLb: 0.05,
        clipCovUb: 2,
        klCovRatio: 0.2,
        ppoKlCoef: 0.3,
      };
      const selected = covSelection(input, options, trial);
      picked += selected.reduce((s, x) => s + x, 0);
      // clip_cov's draw: production's picks first, so the oracle cuts the same tokens if they are its candidates
      const randperm: RandPerm = (len, candidates) => {
        const picked = candidates.flatMap(([i, t], j) => (selected[i * cols + t] ? [j] : []));
        expect(picked.length, "every pick is a candidate").toBe(selected.reduce((s, x) => s + x, 0));
        return [...picked, ...Array.from({ length: len }, (_, j) => j).filter((j) => !picked.includes(j))];
      };
      const want = ppoLossOracle(
        {
          logProbs: asRows(input.logProbs, rows, cols),
          oldLogProbs: asRows(input.oldLogProbs, rows, cols),
          advantages: asRows(input.advantages, rows, cols),
          responseMask: asRows(input.responseMask, rows, cols),
          entropy: asRows(input.entropy, rows, cols),
          refLogProbs: asRows(input.refLogProbs!, rows, cols),
        },
        options,
        randperm,
      );
      const got = ppoPolicyLoss({ ...input, covSelected: selected }, options);
      for (const key of Object.keys(want) as (keyof typeof want)[])
        expect(Math.abs(got[key] - want[key]), key).toBeLessThanOrEqual(1e-12 * Math.max(1, Math.abs(want[key])));
    }
    if (lossMode === "clip_cov" || lossMode === "kl_cov") expect(picked).toBeGreaterThan(3);
  });

  it.each(AGG)("gradient matches finite differences of the loss (%s)", (lossAggMode) => {
    const rng = new Rng(2000 + LOSS_MODES.indexOf(lossMode) * 10 + AGG.indexOf(lossAggMode));
    for (let trial = 0; trial < 4; trial++) {
      // gspo: with one advantage per row, the sequence ratio's stopped value does not change the gradient
      // (GSPO-token equals GSPO), so autograd's gradient is the derivative of the loss
      const input = randomInput(rng, lossMode === "gspo");
      const opts: PolicyLossOptions = {
        lossMode,
        lossAggMode,
        clipRatioLow: 0.2,
        clipRatioHigh: 0.28,
        clipRatioC: 2,
        entropyCoeff: 0.01,
        klLossCoef: 0.1,
        klLossType: "k2",
        clipCovRatio: 0.3,
        clipCovLb: 0.05,
        clipCovUb: 2,
        klCovRatio: 0.3,
      };
      // the covariance selection is a constant of the backward (torch indexes with it): hold it fixed
      const fixed = { ...input, covSelected: covSelection(input, opts) };
      const r = ppoPolicyLoss(fixed, opts);
      const h = 1e-6;
      const numeric = (x: Float64Array): Float64Array =>
        Float64Array.from(x, (v, i) => {
          x[i] = v + h;
          const up = ppoPolicyLoss(fixed, opts).loss;
          x[i] = v - h;
          const down = ppoPolicyLoss(fixed, opts).loss;
          x[i] = v;
          return (up - down) / (2 * h);
        });
      const all = Array.from({ length: input.rows * input.cols }, (_, i) => i);
      const fd = numeric(input.logProbs);
      if (lossMode === "cispo") {
        // the clipped ratio's own derivative (ratio where it is not clipped) is stopped: autograd =
        // the finite difference minus w * -A * logp * ratio on those tokens
        const w = aggWeights(input.responseMask, input.rows, input.cols, lossAggMode);
        all.forEach((k) => {
          const ratio = Math.exp(input.logProbs[k] - input.oldLogProbs[k]);
          if (ratio > 0.8 && ratio < 1.28) fd[k] -= w[k] * -input.advantages[k] * input.logProbs[k] * ratio;
        });
      }
      expect(maxScaledErr(r.dLogProbs, fd, all)).toBeLessThan(1e-5);
      expect(maxScaledErr(r.dEntropy, numeric(input.entropy), all)).toBeLessThan(1e-5);
    }
  });

  it.each(AGG)("split into micro-batches with the step's normalisers and covariance selection, everything adds up (%s)", (lossAggMode) => {
    const rng = new Rng(77);
    const rows = 5;
    const cols = 4;
    const n = rows * cols;
    const old = randn(rng, n, 0.5);
    const full: PpoLossInput = {
      rows,
      cols,
      logProbs: Float64Array.from(old, (v) => v + 0.4 * rng.normal()),
      oldLogProbs: old,
      advantages: randn(rng, n),
      responseMask: Array.from({ length: n }, () => (rng.uniform() < 0.7 ? 1 : 0)),
      entropy: randn(rng, n),
      refLogProbs: randn(rng, n, 0.5),
    };
    const opts: PolicyLossOptions = {
      lossMode,
      lossAggMode,
      entropyCoeff: 0.01,
      klLossCoef: 0.1,
      clipCovRatio: 0.2,
      clipCovLb: 0.01,
      klCovRatio: 0.2,
    };
    const covSelected = covSelection(full, opts, 5);
    if (lossMode === "clip_cov" || lossMode === "kl_cov") expect(covSelected.reduce((s, x) => s + x, 0)).toBeGreaterThan(1);
    const whole = ppoPolicyLoss({ ...full, covSelected }, opts);
    const norm = normFromMask(full.responseMask, rows, cols);
    const slice = (a: ArrayLike<number>, r0: number, r1: number): number[] => Array.from(a).slice(r0 * cols, r1 * cols);
    const parts = [
      [0, 2],
      [2, 5],
    ].map(([r0, r1]) =>
      ppoPolicyLoss(
        {
          rows: r1 - r0,
          cols,
          logProbs: slice(full.logProbs, r0, r1),
          oldLogProbs: slice(full.oldLogProbs, r0, r1),
          advantages: slice(full.advantages, r0, r1),
          responseMask: slice(full.responseMask, r0, r1),
          entropy: slice(full.entropy!, r0, r1),
          refLogProbs: slice(full.refLogProbs!, r0, r1),
          covSelected: slice(covSelected, r0, r1),
        },
        opts,
        norm,
      ),
    );
    for (const key of ["loss", "pg_loss", "kl_loss", "clip_frac", "approx_kl", "entropy_loss"] as const)
      expect(parts[0][key] + parts[1][key], key).toBeCloseTo(whole[key], 12);
    expect([...parts[0].dLogProbs, ...parts[1].dLogProbs]).toEqual(Array.from(whole.dLogProbs));
  });

  it("the entropy bonus adds -entropyCoeff * w to each token's entropy gradient (w of lossAggMode) and leaves dlogp alone", () => {
    const rng = new Rng(31);
    const input = randomInput(rng);
    for (const lossAggMode of AGG) {
      const opts: PolicyLossOptions = { lossMode, lossAggMode, clipCovRatio: 0.3, clipCovLb: 0.01, klCovRatio: 0.3 };
      const without = ppoPolicyLoss(input, opts);
      const withBonus = ppoPolicyLoss(input, { ...opts, entropyCoeff: 0.05 });
      const w = aggWeights(input.responseMask, input.rows, input.cols, lossAggMode);
      expect(Array.from(without.dEntropy).every((g) => g === 0)).toBe(true);
      withBonus.dEntropy.forEach((g, k) => expect(g).toBeCloseTo(-0.05 * w[k], 15));
      expect(withBonus.dEntropy.some((g) => g !== 0)).toBe(true);
      expect(Array.from(withBonus.dLogProbs)).toEqual(Array.from(without.dLogProbs));
      expect(withBonus.loss).toBeCloseTo(without.loss - 0.05 * withBonus.entropy_loss, 12);
    }
  });
});

describe("the dual clip", () => {
  // token 0: A = -1, ratio e^1.5 = 4.48 > c = 3: capped at -A c = 3, no gradient.
  // token 1: A = -1, ratio e^0.5 = 1.65 < c: -A ratio = 1.65, gradient w * -A * ratio.
  // token 2: A = +1, ratio e^1.5 clipped at 1.2: no gradient either way.
  const input: PpoLossInput = {
    rows: 1,
    cols: 3,
    logProbs: [0.5, -0.5, 0.5],
    oldLogProbs: [-1, -1, -1],
    advantages: [-1, -1, 1],
    responseMask: [1, 1, 1],
  };

  it("vanilla: a negative advantage past c loses its gradient; below c, or with A > 0, nothing changes", () => {
    const dual = ppoPolicyLoss(input, { clipRatioC: 3 });
    const off = ppoPolicyLoss(input, { clipRatioC: 1e9 });
    expect(dual.dLogProbs[0]).toBe(0);
    expect(off.dLogProbs[0]).toBeCloseTo(tokenMean(E(1.5), 3), 15);
    expect(dual.dLogProbs[1]).toBeCloseTo(tokenMean(E(0.5), 3), 15);
    expect(dual.dLogProbs[1]).toBe(off.dLogProbs[1]);
    expect(dual.dLogProbs[2]).toBe(0);
    expect(dual.pg_loss).toBeCloseTo(tokenMean(3 + E(0.5) - 1.2, 3), 15);
    expect(off.pg_loss).toBeCloseTo(tokenMean(E(1.5) + E(0.5) - 1.2, 3), 15);
    expect(dual.clip_frac_lower).toBeCloseTo(tokenMean(1, 3), 15);
  });

  it("gspo, clip_cov and kl_cov have none (verl's), so clipRatioC changes nothing there", () => {
    for (const lossMode of ["gspo", "clip_cov", "kl_cov"] as const) {
      const a = ppoPolicyLoss(input, { lossMode, clipRatioC: 1.5 });
      const b = ppoPolicyLoss(input, { lossMode, clipRatioC: 1e9 });
      expect(Array.from(a.dLogProbs)).toEqual(Array.from(b.dLogProbs));
      expect(a.clip_frac_lower).toBe(0);
    }
  });
});
