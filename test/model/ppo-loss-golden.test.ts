// Every policy loss mode and aggregation against torch autograd on fixed inputs (test/fixtures/ppo-loss/
// make_golden.py, run by hand, writes golden.json from verl's formulas in float64 torch): loss, its parts,
// verl's metrics, and the gradients with respect to each token's log-prob and entropy.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { covSelection, ppoPolicyLoss, type PpoLossResult } from "../../src/model/ppo-loss.ts";
import { clipGradNorm, globalGradNorm } from "../../src/model/reference/optim.ts";
import type { KlLossType, LossAggMode, PolicyLossMode, PolicyLossOptions } from "../../src/model/train-types.ts";

interface GoldenCase {
  loss_mode: PolicyLossMode;
  loss_agg_mode: LossAggMode;
  kl_loss_type: KlLossType;
  loss: number;
  pg_loss: number;
  entropy_loss: number;
  kl_loss: number;
  /** verl's metrics for the mode (absent: verl returns none) */
  metrics: Partial<Record<"clip_frac" | "clip_frac_lower" | "approx_kl", number>>;
  d_log_probs: number[];
  d_entropy: number[];
  /** clip_cov: torch.nonzero's candidates [row, col], how many may be cut, and the cut tokens (randperm seeded) */
  candidates?: Array<[number, number]>;
  clip_num?: number;
  /** clip_cov / kl_cov: the tokens verl picked, flat */
  selected?: number[];
}

interface Golden {
  rows: number;
  cols: number;
  inputs: Record<"old_log_probs" | "log_probs" | "advantages" | "response_mask" | "entropy" | "ref_log_probs", number[]>;
  options: Record<string, number>;
  cases: GoldenCase[];
  /** torch.nn.utils.clip_grad_norm_ over a flat gradient */
  grad_clip: Array<{ max_norm: number; grads: number[]; total_norm: number; clipped: number[] }>;
}

const golden = JSON.parse(readFileSync("test/fixtures/ppo-loss/golden.json", "utf8")) as Golden;
const { rows, cols, inputs: x, options: g } = golden;
const input = {
  rows,
  cols,
  logProbs: x.log_probs,
  oldLogProbs: x.old_log_probs,
  advantages: x.advantages,
  responseMask: x.response_mask,
  entropy: x.entropy,
  refLogProbs: x.ref_log_probs,
};

function optionsFor(c: GoldenCase): PolicyLossOptions {
  return {
    lossMode: c.loss_mode,
    lossAggMode: c.loss_agg_mode,
    klLossType: c.kl_loss_type,
    clipRatioLow: g.clip_ratio_low,
    clipRatioHigh: g.clip_ratio_high,
    clipRatioC: g.clip_ratio_c,
    entropyCoeff: g.entropy_coeff,
    klLossCoef: g.kl_loss_coef,
    clipCovRatio: g.clip_cov_ratio,
    clipCovLb: g.clip_cov_lb,
    clipCovUb: g.clip_cov_ub,
    klCovRatio: g.kl_cov_ratio,
    ppoKlCoef: g.ppo_kl_coef,
  };
}

/** |got - want| within `rel` of max(1, |want|). verl's agg_loss divides token-mean by N where we (like verl's
 * masked_mean) divide by N + 1e-8, and seq-mean-token-mean's rows by n_i + 1e-8 where we divide by n_i: a
 * relative difference of at most 1e-8 / 2 on these inputs (rows of 2 tokens or more). */
function close(got: number, want: number, what: string, rel = 1e-8): void {
  expect(Math.abs(got - want), `${what}: ${got} vs ${want}`).toBeLessThanOrEqual(rel * Math.max(1, Math.abs(want)));
}

describe("policy losses against torch autograd (test/fixtures/ppo-loss/golden.json)", () => {
  it("covers every mode with each aggregation, and the inputs exercise the clips", () => {
    expect(golden.cases.length).toBe(24);
    const metric = (mode: string, key: "clip_frac" | "clip_frac_lower") => golden.cases.find((c) => c.loss_mode === mode)!.metrics[key]!;
    expect(metric("vanilla", "clip_frac")).toBeGreaterThan(0);
    expect(metric("vanilla", "clip_frac_lower")).toBeGreaterThan(0);
    expect(metric("gspo", "clip_frac")).toBeGreaterThan(0);
    expect(metric("cispo", "clip_frac")).toBeGreaterThan(0);
  });

  it.each(golden.cases.map((c) => [c.loss_mode, c.loss_agg_mode, c] as const))("%s, %s", (_mode, _agg, c) => {
    const options = optionsFor(c);
    let covSelected: number[] | undefined;
    if (c.loss_mode === "kl_cov") {
      // deterministic: our selection is verl's
      expect(Array.from(covSelection(input, options))).toEqual(c.selected);
      covSelected = c.selected;
    }
    if (c.loss_mode === "clip_cov") {
      // random: ours draws min(clip_num, candidates) of verl's candidates; the loss is then taken on verl's draw
      const candidates = new Set(c.candidates!.map(([i, t]) => i * cols + t));
      const ours = covSelection(input, options, 11);
      const picked = [...ours.keys()].filter((k) => ours[k] === 1);
      expect(picked.length).toBe(Math.min(c.clip_num!, candidates.size));
      for (const k of picked) expect(candidates.has(k), `token ${k} is a candidate`).toBe(true);
      covSelected = c.selected;
    }
    const r = ppoPolicyLoss({ ...input, covSelected }, options);
    for (const key of ["loss", "pg_loss", "entropy_loss", "kl_loss"] as const) close(r[key], c[key], key);
    for (const [key, want] of Object.entries(c.metrics)) close(r[key as keyof PpoLossResult] as number, want, key);
    const grads = (got: Float64Array, want: number[], what: string) => {
      const scale = Math.max(...want.map(Math.abs));
      expect(scale, what).toBeGreaterThan(0);
      got.forEach((v, k) => close(v / scale, want[k] / scale, `${what}[${k}]`));
    };
    grads(r.dLogProbs, c.d_log_probs, "dLogProbs");
    grads(r.dEntropy, c.d_entropy, "dEntropy");
  });
});

describe("gradient clipping against torch.nn.utils.clip_grad_norm_ (test/fixtures/ppo-loss/golden.json)", () => {
  it.each(golden.grad_clip.map((c) => [c.max_norm, c] as const))("max norm %d", (_max, c) => {
    const grads = Float64Array.from(c.grads);
    const norm = globalGradNorm(grads);
    close(norm, c.total_norm, "total norm", 1e-12);
    clipGradNorm(grads, norm, c.max_norm);
    grads.forEach((v, k) => close(v, c.clipped[k], `grad[${k}]`, 1e-12));
  });
});
