/**
 * Plain-TS reference of verl's PPO ("vanilla") policy loss (docs/training.md#the-ppo-loss): ratio, clip,
 * dual clip, entropy bonus, KL loss and the four aggregation modes, with the gradient of the scalar
 * loss with respect to each token's log-prob and entropy (what the model backward consumes).
 * Derivatives follow PyTorch autograd: clamp passes the gradient on its closed interval, max/min
 * split it evenly on ties.
 *
 * Micro-batching: aggregation is linear in the per-token losses, so a step split into micro-batches
 * passes the whole step's normalisers ({@link AggNorm}) and the per-micro-batch losses, metrics and
 * gradients simply add up to those of the whole batch.
 *
 * The CPU trainer's loss and the oracle of the WebGPU loss kernel (src/gpu/kernels/ppo-loss.ts);
 * test/model/ppo-loss-oracle.ts, a line-by-line transcription of verl, is the oracle of this file.
 */
import { ValidationError } from "../types/errors.ts";
import type { LossAggMode, PolicyLossOptions } from "./train-types.ts";
import { klValue } from "../wasm/kl.ts";
import { KL_ALIASES, type KlKind, type KlLossType } from "../wasm/types.ts";

export { klValue };

/** Per-token inputs, all [rows, cols] row-major (cols = response length R). */
export interface PpoLossInput {
  rows: number;
  cols: number;
  logProbs: ArrayLike<number>;
  oldLogProbs: ArrayLike<number>;
  advantages: ArrayLike<number>;
  responseMask: ArrayLike<number>;
  /** Needed when entropyCoeff != 0 (and for the entropy metric). */
  entropy?: ArrayLike<number>;
  /** Needed when klLossCoef != 0. */
  refLogProbs?: ArrayLike<number>;
}

/**
 * Normalisers of the whole step when the input is one micro-batch of it: `tokens` = Σ mask over the
 * step, `rows` = rows in the step, `cols` = mask width. Absent: taken from the input itself.
 */
export interface AggNorm {
  tokens: number;
  rows: number;
  cols: number;
}

export interface PpoLossResult {
  /** pg_loss - entropyCoeff * entropy_loss + klLossCoef * kl_loss */
  loss: number;
  pg_loss: number;
  entropy_loss: number;
  kl_loss: number;
  /** masked_mean(L2 > L1) */
  clip_frac: number;
  /** masked_mean((C1 > L3) * (A < 0)) */
  clip_frac_lower: number;
  /** verl ppo_kl = masked_mean(old - new) (with the ±20 clamp) */
  approx_kl: number;
  /** dLoss/dlogprob per token [rows, cols] */
  dLogProbs: Float64Array;
  /** dLoss/dentropy per token [rows, cols] */
  dEntropy: Float64Array;
}

const MASKED_MEAN_EPS = 1e-8;

export function normFromMask(mask: ArrayLike<number>, rows: number, cols: number): AggNorm {
  let tokens = 0;
  for (let k = 0; k < rows * cols; k++) tokens += mask[k];
  return { tokens, rows, cols };
}

/**
 * dAgg/dx per token for `agg_loss(x, mask, mode)` (the aggregation is linear: agg = Σ w x):
 * token-mean m/(N+1e-8); seq-mean-token-sum m/B; seq-mean-token-mean m/(n_i B) (a row with no tokens
 * contributes 0 where verl would give NaN); seq-mean-token-sum-norm m/T.
 */
export function aggWeights(
  mask: ArrayLike<number>,
  rows: number,
  cols: number,
  mode: LossAggMode,
  norm = normFromMask(mask, rows, cols),
): Float64Array {
  const w = new Float64Array(rows * cols);
  for (let i = 0; i < rows; i++) {
    let rowTokens = 0;
    for (let t = 0; t < cols; t++) rowTokens += mask[i * cols + t];
    let scale: number;
    switch (mode) {
      case "token-mean":
        scale = 1 / (norm.tokens + MASKED_MEAN_EPS);
        break;
      case "seq-mean-token-sum":
        scale = 1 / norm.rows;
        break;
      case "seq-mean-token-mean":
        scale = rowTokens > 0 ? 1 / (rowTokens * norm.rows) : 0;
        break;
      case "seq-mean-token-sum-norm":
        scale = 1 / norm.cols;
        break;
      default:
        throw new ValidationError(`unknown loss_agg_mode ${JSON.stringify(mode)}`, ["lossAggMode"]);
    }
    for (let t = 0; t < cols; t++) w[i * cols + t] = mask[i * cols + t] * scale;
  }
  return w;
}

/** verl `agg_loss(x, mask, mode)`. */
export function aggLoss(
  x: ArrayLike<number>,
  mask: ArrayLike<number>,
  rows: number,
  cols: number,
  mode: LossAggMode,
  norm?: AggNorm,
): number {
  const w = aggWeights(mask, rows, cols, mode, norm);
  let s = 0;
  for (let k = 0; k < w.length; k++) if (w[k] !== 0) s += w[k] * x[k];
  return s;
}

/** d kl_penalty(logp, ref, kind) / d logp, PyTorch conventions (abs'(0) = 0, clamps inclusive). */
export function klGrad(kind: KlLossType, logp: number, ref: number): number {
  switch (KL_ALIASES[kind]) {
    case "k1":
      return 1;
    case "abs":
      return Math.sign(logp - ref);
    case "k2":
      return logp - ref;
    case "k3": {
      const raw = ref - logp;
      if (raw < -20 || raw > 20) return 0;
      const y = Math.exp(raw) - raw - 1;
      if (y < -10 || y > 10) return 0;
      return -(Math.exp(raw) - 1);
    }
    default:
      throw new ValidationError(`unknown KL kind ${JSON.stringify(kind)}`, ["klLossType"]);
  }
}

function canonicalKl(kind: KlLossType): KlKind {
  const k = KL_ALIASES[kind];
  if (!k) throw new ValidationError(`unknown KL kind ${JSON.stringify(kind)} (full is not implemented)`, ["klLossType"]);
  return k;
}

/** Resolved loss options with verl defaults. */
export function resolveLossOptions(o: PolicyLossOptions = {}): Required<PolicyLossOptions> {
  const clipRatio = o.clipRatio ?? 0.2;
  const r = {
    clipRatio,
    clipRatioLow: o.clipRatioLow ?? clipRatio,
    clipRatioHigh: o.clipRatioHigh ?? clipRatio,
    clipRatioC: o.clipRatioC ?? 3.0,
    lossAggMode: o.lossAggMode ?? "token-mean",
    entropyCoeff: o.entropyCoeff ?? 0,
    klLossCoef: o.klLossCoef ?? 0,
    klLossType: o.klLossType ?? "low_var_kl",
    lossMode: o.lossMode ?? "vanilla",
    clipCovRatio: o.clipCovRatio ?? 0.0002,
    clipCovLb: o.clipCovLb ?? 1.0,
    clipCovUb: o.clipCovUb ?? 5.0,
    klCovRatio: o.klCovRatio ?? 0.0002,
    ppoKlCoef: o.ppoKlCoef ?? 0.1,
  } satisfies Required<PolicyLossOptions>;
  if (!(r.clipRatioC > 1)) throw new ValidationError(`clip_ratio_c must be > 1, got ${r.clipRatioC}`, ["clipRatioC"]);
  canonicalKl(r.klLossType);
  return r;
}

/** Gradient of torch.maximum(a, b) (or minimum) with respect to the chosen side: 1, 0, or 1/2 on ties. */
function pick(chosen: number, other: number, wantLarger: boolean): number {
  if (chosen === other) return 0.5;
  return chosen > other === wantLarger ? 1 : 0;
}

/** The PPO policy loss, its metrics and its per-token gradients. */
export function ppoPolicyLoss(input: PpoLossInput, options?: PolicyLossOptions, norm?: AggNorm): PpoLossResult {
  const o = resolveLossOptions(options);
  const { rows, cols } = input;
  const n = rows * cols;
  for (const key of ["logProbs", "oldLogProbs", "advantages", "responseMask"] as const) {
    if (input[key].length !== n) throw new ValidationError(`${key} has ${input[key].length} elements, expected ${n}`, [key]);
  }
  if (o.entropyCoeff !== 0 && input.entropy === undefined) throw new ValidationError("entropyCoeff needs per-token entropy", ["entropy"]);
  if (o.klLossCoef !== 0 && input.refLogProbs === undefined)
    throw new ValidationError("klLossCoef needs reference log-probs", ["refLogProbs"]);
  const m = input.responseMask;
  const nrm = norm ?? normFromMask(m, rows, cols);
  const w = aggWeights(m, rows, cols, o.lossAggMode, nrm);
  const meanScale = 1 / (nrm.tokens + MASKED_MEAN_EPS);
  const kind = canonicalKl(o.klLossType);
  const lo = 1 - o.clipRatioLow;
  const hi = 1 + o.clipRatioHigh;

  const dLogProbs = new Float64Array(n);
  const dEntropy = new Float64Array(n);
  let pg = 0;
  let ent = 0;
  let kl = 0;
  let clip = 0;
  let clipLower = 0;
  let ppoKl = 0;
  for (let k = 0; k < n; k++) {
    if (m[k] === 0) continue;
    const A = input.advantages[k];
    const raw = input.logProbs[k] - input.oldLogProbs[k];
    const delta = Math.min(Math.max(raw, -20), 20);
    const dDelta = raw >= -20 && raw <= 20 ? 1 : 0;
    const ratio = Math.exp(delta);
    const clipped = Math.min(Math.max(ratio, lo), hi);
    const l1 = -A * ratio;
    const l2 = -A * clipped;
    const dl1 = -A * ratio * dDelta;
    const dl2 = ratio >= lo && ratio <= hi ? dl1 : 0;
    const c1 = Math.max(l1, l2);
    const dc1 = pick(l1, l2, true) * dl1 + pick(l2, l1, true) * dl2;
    let loss = c1;
    let dLoss = dc1;
    const l3 = -A * o.clipRatioC;
    if (A < 0) {
      loss = Math.min(l3, c1);
      dLoss = pick(c1, l3, false) * dc1;
    }
    pg += w[k] * loss;
    dLogProbs[k] = w[k] * dLoss;
    ppoKl += -delta * m[k] * meanScale;
    if (l2 > l1) clip += m[k] * meanScale;
    if (c1 > l3 && A < 0) clipLower += m[k] * meanScale;
    if (input.entropy !== undefined) ent += w[k] * input.entropy[k];
    dEntropy[k] = -o.entropyCoeff * w[k];
    if (input.refLogProbs !== undefined) {
      const ref = input.refLogProbs[k];
      kl += w[k] * klValue(kind, input.logProbs[k], ref);
      dLogProbs[k] += o.klLossCoef * w[k] * klGrad(kind, input.logProbs[k], ref);
    }
  }
  return {
    loss: pg - o.entropyCoeff * ent + o.klLossCoef * kl,
    pg_loss: pg,
    entropy_loss: ent,
    kl_loss: kl,
    clip_frac: clip,
    clip_frac_lower: clipLower,
    approx_kl: ppoKl,
    dLogProbs,
    dEntropy,
  };
}
