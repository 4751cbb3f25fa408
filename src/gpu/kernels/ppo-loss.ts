import type { GpuContext } from "../context.ts";
import { kernelBindings, memoKernel } from "../kernel-source.ts";
import type { PolicyLossMode, PolicyLossOptions } from "../../model/train-types.ts";
import { KL_ALIASES } from "../../wasm/types.ts";
import { elementwiseMain, launch1d } from "./grid.ts";

/**
 * verl's policy losses per response token, with their gradients (docs/training.md#the-ppo-loss; the oracle is
 * src/model/ppo-loss.ts):
 * - vanilla: r = exp(clamp(logp - old, -20, 20)), L = max(-A r, -A clamp(r, 1 - clipLow, 1 + clipHigh)), and
 *   for A < 0 the dual clip min(L, -A clipC) (clipC > 1);
 * - gspo: the same clip (no dual clip, no ±20 clamp) with the row's ratio exp(min(seqLogRatio, 10)), whose
 *   value is stopped (each token carries its gradient), aggregated per sequence through `pgWeight`;
 * - gpg: -A logp;
 * - clip_cov: the clip without the ±20 clamp or dual clip, times 0 on the tokens the host `selected`;
 * - kl_cov: -A r (r unclamped), plus ppoKlCoef |logp - old| on the `selected` tokens;
 * - cispo: -sg(clamp(r, 1 - clipLow, 1 + clipHigh)) A logp;
 * plus -entropyCoeff H and, with reference log-probs, klCoef KL.
 * Aggregation (token-mean, seq-mean-token-sum, ...) is linear in the per-token loss, so it is folded into
 * per-token weights computed with the batch on the host: loss = Σ pgWeight L - entropyCoeff Σ weight H + ...
 * Outputs per token: dlogprob, dentropy (the seeds of the backward pass) and METRIC_COLUMNS partial terms
 * that {@link columnSums} adds up. Derivatives follow PyTorch autograd like src/model/ppo-loss.ts:
 * clamps pass the gradient on their closed interval, max/min split it evenly on ties.
 * The `sft` objective reuses the same plumbing with L = -logprob (cross-entropy).
 * The host's per-token inputs come interleaved in one buffer (INPUT_COLUMNS), so the kernel binds 7 storage
 * buffers, under the 8 every WebGPU device allows.
 */

export const KL_KIND_CODES = { kl: 0, k1: 0, abs: 1, mse: 2, k2: 2, low_var_kl: 3, k3: 3 } as const;

export const LOSS_MODE_CODES: Record<PolicyLossMode, number> = { vanilla: 0, gspo: 1, gpg: 2, clip_cov: 3, kl_cov: 4, cispo: 5 };

/** Per-token metric columns: weighted pg loss, weighted entropy, weighted kl, and mask-weighted counts
 * (clipped: the mode's pg_clipfrac term; neg_log_ratio: its ppo_kl term). */
export const METRIC_COLUMNS = ["pg", "entropy", "kl", "clipped", "clipped_lower", "neg_log_ratio", "mask"] as const;

/** The host's per-token inputs, interleaved [n, INPUT_COLUMNS.length]. `pgWeight` is the policy term's
 * aggregation weight (gspo's differs from `weight`, which aggregates entropy and KL); `selected` marks
 * clip_cov / kl_cov's tokens. */
export const INPUT_COLUMNS = ["oldLogprob", "advantage", "refLogprob", "weight", "pgWeight", "mask", "selected"] as const;
export type InputColumn = (typeof INPUT_COLUMNS)[number];
const IC = INPUT_COLUMNS.length;
const at = (name: InputColumn): string => `inputs[i * ${IC}u + ${INPUT_COLUMNS.indexOf(name)}u]`;

/** Interleaves per-token columns of `n` tokens for the kernel; absent columns are 0, an absent `pgWeight` is `weight`. */
export function packLossInputs(n: number, columns: Partial<Record<InputColumn, ArrayLike<number>>>): Float32Array {
  const out = new Float32Array(n * IC);
  INPUT_COLUMNS.forEach((name, c) => {
    const src = name === "pgWeight" ? (columns.pgWeight ?? columns.weight) : columns[name];
    if (src !== undefined) for (let k = 0; k < n; k++) out[k * IC + c] = src[k];
  });
  return out;
}

const BINDINGS = kernelBindings({
  uniforms: {
    n: "u32",
    cols: "u32",
    mode: "u32",
    clipLow: "f32",
    clipHigh: "f32",
    clipC: "f32",
    entropyCoeff: "f32",
    klCoef: "f32",
    klKind: "u32",
    hasRef: "u32",
    sft: "u32",
    ppoKlCoef: "f32",
  },
  buffers: {
    logprob: "read f32",
    entropy: "read f32",
    inputs: "read f32",
    seqLogRatio: "read f32",
    dlogprob: "read_write f32",
    dentropy: "read_write f32",
    metrics: "read_write f32",
  },
});

export interface PpoParams {
  /** [vanilla] */
  mode?: PolicyLossMode;
  clipLow: number;
  clipHigh: number;
  clipC: number;
  entropyCoeff: number;
  klCoef: number;
  klKind: keyof typeof KL_KIND_CODES;
  /** Reference log-probs were given (the kl column and, with klCoef, the KL gradient). */
  hasRef: boolean;
  /** kl_cov's coefficient [0]. */
  ppoKlCoef?: number;
  /** Cross-entropy instead of the PPO objective. */
  sft?: boolean;
}

/** The kernel's parameters for resolved loss options; `hasRef`: reference log-probs are bound. */
export function ppoParams(o: Required<PolicyLossOptions>, hasRef: boolean): PpoParams {
  return {
    mode: o.lossMode,
    clipLow: o.clipRatioLow,
    clipHigh: o.clipRatioHigh,
    clipC: o.clipRatioC,
    entropyCoeff: o.entropyCoeff,
    klCoef: o.klLossCoef,
    klKind: KL_ALIASES[o.klLossType],
    hasRef,
    ppoKlCoef: o.ppoKlCoef,
  };
}

export interface PpoBuffers {
  logprob: GPUBuffer;
  entropy: GPUBuffer;
  /** [n, INPUT_COLUMNS.length] from {@link packLossInputs} */
  inputs: GPUBuffer;
  /** gspo: [rows] from {@link seqLogRatio} (any buffer for the other modes) */
  seqLogRatio: GPUBuffer;
  dlogprob: GPUBuffer;
  dentropy: GPUBuffer;
  /** [n, METRIC_COLUMNS.length] */
  metrics: GPUBuffer;
}

const ROW_BINDINGS = kernelBindings({
  uniforms: { rows: "u32", cols: "u32" },
  buffers: { logprob: "read f32", inputs: "read f32", seqLogRatio: "read_write f32" },
});

/** gspo: per row of [rows, cols] tokens, the masked mean of logp - old (an empty row divides by 1). */
export function seqLogRatio(
  ctx: GpuContext,
  b: { logprob: GPUBuffer; inputs: GPUBuffer; seqLogRatio: GPUBuffer },
  rows: number,
  cols: number,
): void {
  const wg = ctx.tuning.elementwise;
  const k = memoKernel(ctx.tuning, "ppo_seq_log_ratio", ROW_BINDINGS, () =>
    elementwiseMain(
      wg,
      "P.rows",
      `  var s = 0.0;
  var len = 0.0;
  for (var t = 0u; t < P.cols; t++) {
    let i = r * P.cols + t;
    let m = ${at("mask")};
    // masked tokens add nothing, even when their log-probs are not finite
    if (m != 0.0) {
      s += (logprob[i] - ${at("oldLogprob")}) * m;
      len += m;
    }
  }
  seqLogRatio[r] = s / max(len, 1.0);`,
      "r",
    ),
  );
  ctx.dispatch(k, { rows, cols }, b, launch1d(ctx, rows));
}

export function ppoLoss(ctx: GpuContext, b: PpoBuffers, shape: { rows: number; cols: number }, p: PpoParams): void {
  const wg = ctx.tuning.elementwise;
  const C = METRIC_COLUMNS.length;
  const n = shape.rows * shape.cols;
  const k = memoKernel(
    ctx.tuning,
    "ppo_loss",
    BINDINGS,
    () => `
// kl_penalty(logp, ref) and its derivative in logp, verl's kinds.
fn klValueGrad(logp: f32, refLp: f32) -> vec2f {
  let diff = logp - refLp;
  switch (P.klKind) {
    case 0u: { return vec2f(diff, 1.0); }
    case 1u: { return vec2f(abs(diff), sign(diff)); }
    case 2u: { return vec2f(0.5 * diff * diff, diff); }
    default: {
      let xr = refLp - logp;
      let x = clamp(xr, -20.0, 20.0);
      let ex = exp(x);
      let raw = ex - x - 1.0;
      let val = clamp(raw, -10.0, 10.0);
      // d/dlogp of exp(x) - x - 1 with x = ref - logp; zero where a clamp is active.
      let live = xr == x && raw == val;
      return vec2f(val, select(0.0, 1.0 - ex, live));
    }
  }
}
// Share of the gradient torch.maximum/minimum gives the chosen side: 1, 0, or 1/2 on ties.
fn pick(chosen: f32, other: f32, wantLarger: bool) -> f32 {
  if (chosen == other) { return 0.5; }
  return select(0.0, 1.0, (chosen > other) == wantLarger);
}
${elementwiseMain(
  wg,
  "P.n",
  `  let w = ${at("weight")};
  let m = ${at("mask")};
  let o = i * ${C}u;
  // Masked tokens contribute nothing, even when their inputs are not finite (0 * NaN would poison the sums).
  if (m == 0.0) {
    dlogprob[i] = 0.0;
    dentropy[i] = 0.0;
    for (var c = 0u; c < ${C}u; c++) { metrics[o + c] = 0.0; }
    return;
  }
  if (P.sft != 0u) {
    dlogprob[i] = -w;
    dentropy[i] = 0.0;
    metrics[o] = -w * logprob[i];
    metrics[o + 1u] = w * entropy[i];
    for (var c = 2u; c < ${C - 1}u; c++) { metrics[o + c] = 0.0; }
    metrics[o + ${C - 1}u] = m;
    return;
  }
  let A = ${at("advantage")};
  let lp = logprob[i];
  let old = ${at("oldLogprob")};
  let lo = 1.0 - P.clipLow;
  let hi = 1.0 + P.clipHigh;
  var L = 0.0;
  var dL = 0.0;
  var clippedHit = 0.0;
  var lowerHit = 0.0;
  var negKl = 0.0;
  switch (P.mode) {
    case 0u: {
      let rawDelta = lp - old;
      let delta = clamp(rawDelta, -20.0, 20.0);
      let ratio = exp(delta);
      let dRatio = select(0.0, ratio, rawDelta == delta);
      let clipped = clamp(ratio, lo, hi);
      let L1 = -A * ratio;
      let L2 = -A * clipped;
      let dL1 = -A * dRatio;
      let dL2 = select(0.0, dL1, clipped == ratio);
      let C1 = max(L1, L2);
      let dC1 = pick(L1, L2, true) * dL1 + pick(L2, L1, true) * dL2;
      let L3 = -A * P.clipC;
      L = C1;
      dL = dC1;
      if (A < 0.0) {
        L = min(L3, C1);
        dL = pick(C1, L3, false) * dC1;
      }
      clippedHit = select(0.0, 1.0, L2 > L1);
      lowerHit = select(0.0, 1.0, C1 > L3 && A < 0.0);
      negKl = -delta;
    }
    case 1u: {
      let s = seqLogRatio[i / P.cols];
      let ratio = exp(min(s, 10.0));
      let dRatio = select(0.0, ratio, s <= 10.0);
      let clipped = clamp(ratio, lo, hi);
      let L1 = -A * ratio;
      let L2 = -A * clipped;
      let dL1 = -A * dRatio;
      let dL2 = select(0.0, dL1, clipped == ratio);
      L = max(L1, L2);
      dL = pick(L1, L2, true) * dL1 + pick(L2, L1, true) * dL2;
      clippedHit = select(0.0, 1.0, L2 > L1);
      negKl = -(lp - old);
    }
    case 2u: {
      L = -lp * A;
      dL = -A;
      negKl = -(lp - old);
    }
    case 3u: {
      let ratio = exp(lp - old);
      let clipped = clamp(ratio, lo, hi);
      let L1 = -A * ratio;
      let L2 = -A * clipped;
      let dL1 = -A * ratio;
      let dL2 = select(0.0, dL1, clipped == ratio);
      let corr = 1.0 - ${at("selected")};
      L = max(L1, L2) * corr;
      dL = (pick(L1, L2, true) * dL1 + pick(L2, L1, true) * dL2) * corr;
      clippedHit = 1.0 - corr;
      negKl = -(lp - old);
    }
    case 4u: {
      let diff = lp - old;
      let ratio = exp(diff);
      let pen = ${at("selected")} * P.ppoKlCoef;
      L = -A * ratio + pen * abs(diff);
      dL = -A * ratio + pen * sign(diff);
      negKl = abs(diff);
    }
    default: {
      let delta = clamp(lp - old, -20.0, 20.0);
      let ratio = exp(delta);
      let cw = clamp(ratio, lo, hi);
      L = -cw * A * lp;
      dL = -cw * A;
      clippedHit = select(0.0, 1.0, ratio != cw);
      negKl = -delta;
    }
  }
  var kl = vec2f(0.0, 0.0);
  if (P.hasRef != 0u) { kl = klValueGrad(lp, ${at("refLogprob")}); }
  let pw = ${at("pgWeight")};
  if (P.mode == 1u) {
    dlogprob[i] = pw * dL + w * P.klCoef * kl.y;
  } else {
    dlogprob[i] = w * (dL + P.klCoef * kl.y);
  }
  dentropy[i] = -P.entropyCoeff * w;
  metrics[o] = pw * L;
  metrics[o + 1u] = w * entropy[i];
  metrics[o + 2u] = w * kl.x;
  metrics[o + 3u] = m * clippedHit;
  metrics[o + 4u] = m * lowerHit;
  metrics[o + 5u] = m * negKl;
  metrics[o + 6u] = m;`,
)}`,
  );
  ctx.dispatch(
    k,
    {
      n,
      cols: shape.cols,
      mode: LOSS_MODE_CODES[p.mode ?? "vanilla"],
      clipLow: p.clipLow,
      clipHigh: p.clipHigh,
      clipC: p.clipC,
      entropyCoeff: p.entropyCoeff,
      klCoef: p.klCoef,
      klKind: KL_KIND_CODES[p.klKind],
      hasRef: p.hasRef ? 1 : 0,
      sft: p.sft === true ? 1 : 0,
      ppoKlCoef: p.ppoKlCoef ?? 0,
    },
    b,
    launch1d(ctx, n),
  );
}
