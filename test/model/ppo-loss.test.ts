import { describe, expect, it } from "vitest";
import { Rng } from "../../src/model/init.ts";
import type { KlLossType, LossAggMode, PolicyLossOptions } from "../../src/model/train-types.ts";
import { aggLoss, klValue, ppoPolicyLoss, resolveLossOptions, type PpoLossInput } from "../../src/model/ppo-loss.ts";
import { KL_ALIASES } from "../../src/wasm/types.ts";
import { maxScaledErr, randInt, randn } from "./helpers.ts";
import { klPenaltyOracle, ppoLossOracle } from "./ppo-loss-oracle.ts";

const MODES: LossAggMode[] = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"];

describe("PPO policy loss reference (docs/training.md#the-ppo-loss)", () => {
  it("two tokens, both clipped: loss -0.2, clip fraction 1, no gradient", () => {
    const r = ppoPolicyLoss(
      { rows: 1, cols: 2, logProbs: [-0.5, -1.5], oldLogProbs: [-1, -1], advantages: [1, -1], responseMask: [1, 1] },
      { clipRatio: 0.2 },
    );
    expect(r.pg_loss).toBeCloseTo(-0.2, 7);
    expect(r.loss).toBeCloseTo(-0.2, 7);
    expect(r.clip_frac).toBeCloseTo(1.0, 7);
    expect(r.approx_kl).toBeCloseTo(0, 12);
    // both tokens are clipped, so neither log-prob gets a gradient
    expect(Array.from(r.dLogProbs)).toEqual([0, 0]);
  });

  it("dual clip caps the loss of negative advantages at -A*c", () => {
    // ratio e^2 = 7.39 with A = -1: L1 = 7.39 > c = 3, so the loss is 3 and the gradient 0.
    const r = ppoPolicyLoss({ rows: 1, cols: 1, logProbs: [1], oldLogProbs: [-1], advantages: [-1], responseMask: [1] }, { clipRatioC: 3 });
    expect(r.pg_loss).toBeCloseTo(3, 6);
    expect(r.clip_frac_lower).toBeCloseTo(1, 6);
    expect(r.dLogProbs[0]).toBe(0);
    expect(() =>
      ppoPolicyLoss({ rows: 1, cols: 1, logProbs: [0], oldLogProbs: [0], advantages: [1], responseMask: [1] }, { clipRatioC: 1 }),
    ).toThrow(/clip_ratio_c/);
  });

  it.each<[KlLossType, number]>([
    ["k1", 0.5],
    ["abs", 0.5],
    ["k2", 0.125],
    ["k3", 0.1065307],
    ["low_var_kl", 0.1065307],
    ["mse", 0.125],
  ])("KL loss kind %s (docs/training.md#kl-penalties) on one token is %f", (kind, expected) => {
    const r = ppoPolicyLoss(
      { rows: 1, cols: 1, logProbs: [-1], oldLogProbs: [-1], advantages: [0], responseMask: [1], refLogProbs: [-1.5] },
      { klLossCoef: 0.5, klLossType: kind },
    );
    expect(r.kl_loss).toBeCloseTo(expected, 6);
    expect(r.loss).toBeCloseTo(0.5 * expected, 6);
  });

  const KINDS: KlLossType[] = ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"];

  it.each(MODES)("loss and metrics equal verl's formulas (test/model/ppo-loss-oracle.ts) on random batches, mode %s", (mode) => {
    const rng = new Rng(MODES.indexOf(mode) + 90);
    for (let trial = 0; trial < KINDS.length; trial++) {
      const rows = randInt(rng, 1, 5);
      const cols = randInt(rng, 1, 9);
      const n = rows * cols;
      const old = randn(rng, n, 0.5);
      // Some ratios inside the clip range, some clipped, some dual-clipped, a few past the ±20 clamp.
      const logp = Float64Array.from(old, (v) => v + rng.normal() * 0.6 + (rng.uniform() < 0.05 ? 30 * Math.sign(rng.normal()) : 0));
      const mask = Array.from({ length: n }, () => (rng.uniform() < 0.75 ? 1 : 0));
      if (trial === 0) mask.fill(0, 0, cols); // a row with no response tokens
      const input = {
        rows,
        cols,
        logProbs: logp,
        oldLogProbs: old,
        advantages: randn(rng, n),
        responseMask: mask,
        entropy: randn(rng, n),
        refLogProbs: randn(rng, n, 0.5),
      };
      const options: Required<PolicyLossOptions> = {
        ...resolveLossOptions(),
        clipRatio: 0.2,
        clipRatioLow: 0.2,
        clipRatioHigh: 0.28,
        clipRatioC: 2.5,
        lossAggMode: mode,
        entropyCoeff: 0.01,
        klLossCoef: 0.1,
        klLossType: KINDS[trial],
      };
      const asRows = (a: ArrayLike<number>) => Array.from({ length: rows }, (_, i) => Array.from(a).slice(i * cols, (i + 1) * cols));
      const want = ppoLossOracle(
        {
          logProbs: asRows(logp),
          oldLogProbs: asRows(old),
          advantages: asRows(input.advantages),
          responseMask: asRows(mask),
          entropy: asRows(input.entropy),
          refLogProbs: asRows(input.refLogProbs),
        },
        options,
      );
      const got = ppoPolicyLoss(input, options);
      for (const key of Object.keys(want) as (keyof typeof want)[]) {
        expect(Math.abs(got[key] - want[key]), `${key} (kl ${KINDS[trial]})`).toBeLessThanOrEqual(1e-12 * Math.max(1, Math.abs(want[key])));
      }
    }
  });

  it.each(KINDS)("klValue(%s) equals verl's kl_penalty, clamps included", (kind) => {
    for (const [logp, ref] of [
      [-1, -1.5],
      [-0.2, -3],
      [-4, -0.1],
      [0, -30],
      [-30, 0],
      [-2, -2],
    ]) {
      expect(klValue(KL_ALIASES[kind], logp, ref)).toBeCloseTo(klPenaltyOracle(logp, ref, kind), 12);
    }
  });

  it("aggregates with the four modes as documented", () => {
    const x = [1, 2, 3, 4, 5, 6];
    const m = [1, 1, 0, 1, 0, 0];
    expect(aggLoss(x, m, 2, 3, "token-mean")).toBeCloseTo(7 / 3, 7);
    expect(aggLoss(x, m, 2, 3, "seq-mean-token-sum")).toBeCloseTo((3 + 4) / 2, 12);
    expect(aggLoss(x, m, 2, 3, "seq-mean-token-mean")).toBeCloseTo((1.5 + 4) / 2, 12);
    expect(aggLoss(x, m, 2, 3, "seq-mean-token-sum-norm")).toBeCloseTo(7 / 3, 12);
    expect(() => aggLoss(x, m, 2, 3, "bogus" as LossAggMode)).toThrow(/loss_agg_mode/);
  });

  it("the entropy bonus subtracts entropyCoeff * agg(entropy)", () => {
    const input = {
      rows: 1,
      cols: 2,
      logProbs: [-1, -1],
      oldLogProbs: [-1, -1],
      advantages: [0.5, 0.5],
      responseMask: [1, 1],
      entropy: [2, 4],
    };
    const r = ppoPolicyLoss(input, { entropyCoeff: 0.1 });
    expect(r.entropy_loss).toBeCloseTo(3, 7);
    expect(r.loss).toBeCloseTo(-0.5 - 0.3, 7);
    expect(r.dEntropy[0]).toBeCloseTo(-0.05, 7);
  });

  it.each(MODES)("gradient matches finite differences, mode %s", (mode) => {
    const rng = new Rng(MODES.indexOf(mode) + 40);
    for (let trial = 0; trial < 4; trial++) {
      const rows = randInt(rng, 1, 4);
      const cols = randInt(rng, 1, 7);
      const n = rows * cols;
      const old = randn(rng, n, 0.5);
      // Spread new log-probs so some ratios are inside the clip range, some outside, some dual-clipped.
      const logp = Float64Array.from(old, (v) => v + rng.normal() * 0.6);
      const entropy = randn(rng, n);
      const input: PpoLossInput = {
        rows,
        cols,
        logProbs: logp,
        oldLogProbs: old,
        advantages: randn(rng, n),
        responseMask: Array.from({ length: n }, () => (rng.uniform() < 0.8 ? 1 : 0)),
        entropy,
        refLogProbs: randn(rng, n, 0.5),
      };
      const kinds: KlLossType[] = ["k1", "abs", "k2", "k3"];
      const opts: PolicyLossOptions = {
        lossAggMode: mode,
        clipRatioLow: 0.2,
        clipRatioHigh: 0.28,
        clipRatioC: 2,
        entropyCoeff: 0.01,
        klLossCoef: 0.1,
        klLossType: kinds[trial],
      };
      const r = ppoPolicyLoss(input, opts);
      const h = 1e-6;
      const numeric = (x: Float64Array): Float64Array =>
        Float64Array.from(x, (v, i) => {
          x[i] = v + h;
          const up = ppoPolicyLoss(input, opts).loss;
          x[i] = v - h;
          const down = ppoPolicyLoss(input, opts).loss;
          x[i] = v;
          return (up - down) / (2 * h);
        });
      const all = Array.from({ length: n }, (_, i) => i);
      expect(maxScaledErr(r.dLogProbs, numeric(logp), all)).toBeLessThan(1e-5);
      expect(maxScaledErr(r.dEntropy, numeric(entropy), all)).toBeLessThan(1e-5);
    }
  });
});
