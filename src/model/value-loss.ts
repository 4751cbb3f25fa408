/**
 * Plain-TS reference of verl's clipped value loss (`compute_value_loss`, docs/training.md#the-critic):
 *
 *   vf_loss = 0.5 · agg(max((v − R)², (clip(v, old − ε, old + ε) − R)²))
 *   vf_clipfrac = masked_mean((clip(v) − R)² > (v − R)²)
 *
 * with the gradient of vf_loss with respect to each predicted value v (what the value head's backward
 * consumes). The clip is verl's `clip_by_value`, max(min(v, old + ε), old − ε), and derivatives follow
 * PyTorch autograd as in ppo-loss.ts: min/max split the gradient evenly on ties. Aggregation is
 * ppo-loss.ts's (`aggWeights`), with the same micro-batch normalisers ({@link AggNorm}).
 */
import { ValidationError } from "../types/errors.ts";
import { aggWeights, normFromMask, pick, type AggNorm } from "./ppo-loss.ts";
import type { LossAggMode } from "./train-types.ts";

/** Per-token inputs, all [rows, cols] row-major (cols = response length R). */
export interface ValueLossInput {
  rows: number;
  cols: number;
  /** The critic's current predictions (verl's `vpreds`). */
  values: ArrayLike<number>;
  /** Value targets (GAE's `returns`). */
  returns: ArrayLike<number>;
  /** The predictions the returns were computed with (verl's `values`): the clip's centre. */
  oldValues: ArrayLike<number>;
  responseMask: ArrayLike<number>;
}

export interface ValueLossOptions {
  /** ε of the clip around the old values [0.5, verl's `critic.cliprange_value`]. */
  cliprangeValue?: number;
  /** [token-mean] */
  lossAggMode?: LossAggMode;
}

export interface ValueLossResult {
  vf_loss: number;
  /** masked_mean((clip(v) − R)² > (v − R)²) */
  vf_clipfrac: number;
  /** masked_mean(v) (verl's `critic/vpred_mean`) */
  vpred_mean: number;
  /** dvf_loss/dv per token [rows, cols] */
  dValues: Float64Array;
}

const MASKED_MEAN_EPS = 1e-8;

/** verl's default `critic.cliprange_value`. */
export const DEFAULT_CLIPRANGE_VALUE = 0.5;

/** The clip range, checked: a finite number >= 0. */
export function resolveCliprangeValue(value: number | undefined): number {
  const eps = value ?? DEFAULT_CLIPRANGE_VALUE;
  if (!(Number.isFinite(eps) && eps >= 0))
    throw new ValidationError(`cliprange_value must be a finite number >= 0, got ${value}`, ["cliprangeValue"]);
  return eps;
}

/** The clipped value loss, its metrics and its per-token gradient. */
export function valueLoss(input: ValueLossInput, options: ValueLossOptions = {}, norm?: AggNorm): ValueLossResult {
  const eps = resolveCliprangeValue(options.cliprangeValue);
  const { rows, cols } = input;
  const n = rows * cols;
  for (const key of ["values", "returns", "oldValues", "responseMask"] as const) {
    if (input[key].length !== n) throw new ValidationError(`${key} has ${input[key].length} elements, expected ${n}`, [key]);
  }
  const m = input.responseMask;
  const nrm = norm ?? normFromMask(m, rows, cols);
  const w = aggWeights(m, rows, cols, options.lossAggMode ?? "token-mean", nrm);
  const meanScale = 1 / (nrm.tokens + MASKED_MEAN_EPS);
  const dValues = new Float64Array(n);
  let loss = 0;
  let clipfrac = 0;
  let vpred = 0;
  for (let k = 0; k < n; k++) {
    if (m[k] === 0) continue;
    const v = input.values[k];
    const ret = input.returns[k];
    const old = input.oldValues[k];
    const hi = old + eps;
    const lo = old - eps;
    const below = Math.min(v, hi);
    const clipped = Math.max(below, lo);
    const dClipped = pick(v, hi, false) * pick(below, lo, true);
    const l1 = (v - ret) ** 2;
    const l2 = (clipped - ret) ** 2;
    const dl1 = 2 * (v - ret);
    const dl2 = 2 * (clipped - ret) * dClipped;
    loss += w[k] * Math.max(l1, l2);
    dValues[k] = 0.5 * w[k] * (pick(l1, l2, true) * dl1 + pick(l2, l1, true) * dl2);
    if (l2 > l1) clipfrac += m[k] * meanScale;
    vpred += v * m[k] * meanScale;
  }
  return { vf_loss: 0.5 * loss, vf_clipfrac: clipfrac, vpred_mean: vpred, dValues };
}
