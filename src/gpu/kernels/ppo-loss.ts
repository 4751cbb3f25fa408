import type { GpuContext } from "../context.ts";
import { kernelBindings, memoKernel } from "../kernel-source.ts";
import { elementwiseMain, launch1d } from "./grid.ts";

/**
 * The PPO ("vanilla", verl's) policy loss per response token, with its gradient: ratio
 * r = exp(clamp(logp - old, -20, 20)), L = max(-A r, -A clamp(r, 1 - clipLow, 1 + clipHigh)), and for A < 0
 * the dual clip min(L, -A clipC) (clipC > 1); plus -entropyCoeff H and, with reference log-probs, klCoef KL.
 * Aggregation (token-mean, seq-mean-token-sum, ...) is linear in the per-token loss, so it is folded into a
 * per-token weight w (0 on masked tokens) computed with the batch on the host: loss = sum w L.
 * Outputs per token: dlogprob, dentropy (the seeds of the backward pass) and METRIC_COLUMNS partial terms
 * that {@link columnSums} adds up. Derivatives follow PyTorch autograd like src/model/ppo-loss.ts:
 * clamps pass the gradient on their closed interval, max/min split it evenly on ties.
 * The `sft` objective reuses the same plumbing with L = -logprob (cross-entropy).
 */

export const KL_KIND_CODES = { kl: 0, k1: 0, abs: 1, mse: 2, k2: 2, low_var_kl: 3, k3: 3 } as const;

/** Per-token metric columns: weighted pg loss, weighted entropy, weighted kl, and mask-weighted counts. */
export const METRIC_COLUMNS = ["pg", "entropy", "kl", "clipped", "clipped_lower", "neg_log_ratio", "mask"] as const;

const BINDINGS = kernelBindings({
  uniforms: {
    n: "u32",
    clipLow: "f32",
    clipHigh: "f32",
    clipC: "f32",
    entropyCoeff: "f32",
    klCoef: "f32",
    klKind: "u32",
    hasRef: "u32",
    sft: "u32",
  },
  buffers: {
    logprob: "read f32",
    oldLogprob: "read f32",
    advantages: "read f32",
    entropy: "read f32",
    refLogprob: "read f32",
    weight: "read f32",
    mask: "read f32",
    dlogprob: "read_write f32",
    dentropy: "read_write f32",
    metrics: "read_write f32",
  },
});

export interface PpoParams {
  clipLow: number;
  clipHigh: number;
  clipC: number;
  entropyCoeff: number;
  klCoef: number;
  klKind: keyof typeof KL_KIND_CODES;
  /** Reference log-probs were given (the kl column and, with klCoef, the KL gradient). */
  hasRef: boolean;
  /** Cross-entropy instead of the PPO objective. */
  sft?: boolean;
}

export interface PpoBuffers {
  logprob: GPUBuffer;
  oldLogprob: GPUBuffer;
  advantages: GPUBuffer;
  entropy: GPUBuffer;
  /** Reference log-probs (any buffer when klCoef is 0). */
  refLogprob: GPUBuffer;
  weight: GPUBuffer;
  mask: GPUBuffer;
  dlogprob: GPUBuffer;
  dentropy: GPUBuffer;
  /** [n, METRIC_COLUMNS.length] */
  metrics: GPUBuffer;
}

export function ppoLoss(ctx: GpuContext, b: PpoBuffers, n: number, p: PpoParams): void {
  const wg = ctx.tuning.elementwise;
  const C = METRIC_COLUMNS.length;
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
  `  let w = weight[i];
  let m = mask[i];
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
  let A = advantages[i];
  let rawDelta = logprob[i] - oldLogprob[i];
  let delta = clamp(rawDelta, -20.0, 20.0);
  let ratio = exp(delta);
  let dRatio = select(0.0, ratio, rawDelta == delta);
  let clipped = clamp(ratio, 1.0 - P.clipLow, 1.0 + P.clipHigh);
  let L1 = -A * ratio;
  let L2 = -A * clipped;
  let dL1 = -A * dRatio;
  let dL2 = select(0.0, dL1, clipped == ratio);
  let C1 = max(L1, L2);
  let dC1 = pick(L1, L2, true) * dL1 + pick(L2, L1, true) * dL2;
  let L3 = -A * P.clipC;
  var L = C1;
  var dL = dC1;
  if (A < 0.0) {
    L = min(L3, C1);
    dL = pick(C1, L3, false) * dC1;
  }
  let lower = select(0.0, 1.0, C1 > L3 && A < 0.0);
  var kl = vec2f(0.0, 0.0);
  if (P.hasRef != 0u) { kl = klValueGrad(logprob[i], refLogprob[i]); }
  dlogprob[i] = w * (dL + P.klCoef * kl.y);
  dentropy[i] = -P.entropyCoeff * w;
  metrics[o] = w * L;
  metrics[o + 1u] = w * entropy[i];
  metrics[o + 2u] = w * kl.x;
  metrics[o + 3u] = m * select(0.0, 1.0, L2 > L1);
  metrics[o + 4u] = m * lower;
  metrics[o + 5u] = m * -delta;
  metrics[o + 6u] = m;`,
)}`,
  );
  ctx.dispatch(
    k,
    {
      n,
      clipLow: p.clipLow,
      clipHigh: p.clipHigh,
      clipC: p.clipC,
      entropyCoeff: p.entropyCoeff,
      klCoef: p.klCoef,
      klKind: KL_KIND_CODES[p.klKind],
      hasRef: p.hasRef ? 1 : 0,
      sft: p.sft === true ? 1 : 0,
    },
    b,
    launch1d(ctx, n),
  );
}
