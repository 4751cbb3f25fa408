/**
 * Plain-TS reference of verl's PPO policy losses (docs/training.md#the-ppo-loss): the six loss modes
 * (`vanilla` clip with dual clip, `gspo`, `gpg`, `clip_cov`, `kl_cov`, `cispo`), entropy bonus, KL loss and
 * the four aggregation modes, with the gradient of the scalar loss with respect to each token's log-prob and
 * entropy (what the model backward consumes). Derivatives follow PyTorch autograd: clamp passes the gradient
 * on its closed interval, max/min split it evenly on ties, abs'(0) = 0, and the stop-gradients of gspo and
 * cispo are kept (their gradient is not the derivative of the loss value).
 *
 * Micro-batching: aggregation is linear in the per-token losses, so a step split into micro-batches
 * passes the whole step's normalisers ({@link AggNorm}) and the per-micro-batch losses, metrics and
 * gradients simply add up to those of the whole batch. gspo needs whole rows (micro-batches split rows,
 * never a row). clip_cov and kl_cov single out tokens by their covariance over the whole step
 * ({@link covSelection}); the trainer computes that once per step and passes each micro-batch its share
 * (`covSelected`), so they add up too (verl selects per micro-batch instead).
 *
 * The CPU trainer's loss and the oracle of the WebGPU loss kernel (src/gpu/kernels/ppo-loss.ts);
 * test/model/ppo-loss-oracle.ts, a line-by-line transcription of verl, is the oracle of this file.
 */
import { ValidationError } from "../types/errors.ts";
import type { LossAggMode, PolicyLossMode, PolicyLossOptions } from "./train-types.ts";
import { Rng } from "./init.ts";
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
  /** clip_cov / kl_cov: 1 on the tokens {@link covSelection} picked over the whole step, these rows' share.
   * Absent: picked over this input alone (seed 0). */
  covSelected?: ArrayLike<number>;
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
  /** verl's pg_clipfrac: share of tokens where the clipped term won (vanilla, gspo), where the ratio was
   * clipped (cispo), whose gradient was cut (clip_cov); 0 for gpg and kl_cov */
  clip_frac: number;
  /** vanilla: masked_mean((C1 > L3) * (A < 0)), the dual clip; 0 for the other modes */
  clip_frac_lower: number;
  /** verl ppo_kl = masked_mean(old - new) (vanilla and cispo with the ±20 clamp); kl_cov: masked_mean(|new - old|) */
  approx_kl: number;
  /** dLoss/dlogprob per token [rows, cols] */
  dLogProbs: Float64Array;
  /** dLoss/dentropy per token [rows, cols] */
  dEntropy: Float64Array;
}

const MASKED_MEAN_EPS = 1e-8;

export const POLICY_LOSS_MODES = ["vanilla", "gspo", "gpg", "clip_cov", "kl_cov", "cispo"] as const satisfies readonly PolicyLossMode[];

/** The modes that single out tokens by covariance over the whole step ({@link covSelection}). */
export function needsCovSelection(mode: PolicyLossMode): boolean {
  return mode === "clip_cov" || mode === "kl_cov";
}

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

/** The aggregation of the policy term: gspo's is always seq-mean-token-mean (verl hard-codes it); the
 * entropy and KL terms follow `lossAggMode` in every mode. */
export function pgAggMode(o: Pick<Required<PolicyLossOptions>, "lossMode" | "lossAggMode">): LossAggMode {
  return o.lossMode === "gspo" ? "seq-mean-token-mean" : o.lossAggMode;
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
  if (!POLICY_LOSS_MODES.includes(r.lossMode))
    throw new ValidationError(`unknown loss_mode ${JSON.stringify(r.lossMode)} (one of ${POLICY_LOSS_MODES.join(", ")})`, ["lossMode"]);
  if (r.lossMode === "clip_cov" && !(r.clipCovRatio > 0))
    throw new ValidationError(`clip_cov_ratio must be > 0, got ${r.clipCovRatio}`, ["clipCovRatio"]);
  if (r.lossMode === "kl_cov" && !(r.klCovRatio > 0 && r.klCovRatio <= 1))
    throw new ValidationError(`kl_cov_ratio must be in (0, 1], got ${r.klCovRatio}`, ["klCovRatio"]);
  canonicalKl(r.klLossType);
  return r;
}

/** Gradient of torch.maximum(a, b) (or minimum) with respect to the chosen side: 1, 0, or 1/2 on ties. */
export function pick(chosen: number, other: number, wantLarger: boolean): number {
  if (chosen === other) return 0.5;
  return chosen > other === wantLarger ? 1 : 0;
}

/** One token's policy term: its loss, dloss/dlogprob, and its share of the clip metrics and ppo_kl. */
interface TokenTerm {
  loss: number;
  dLoss: number;
  clipped: boolean;
  lower: boolean;
  negKl: number;
}

/** PPO clip with the ±20 clamp of the log-ratio and, for A < 0, the dual clip at -A c. */
function vanillaTerm(o: Required<PolicyLossOptions>, A: number, logp: number, old: number): TokenTerm {
  const lo = 1 - o.clipRatioLow;
  const hi = 1 + o.clipRatioHigh;
  const raw = logp - old;
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
  return { loss, dLoss, clipped: l2 > l1, lower: c1 > l3 && A < 0, negKl: -delta };
}

/** The clipped objective with the row's ratio s = exp(min(seqLogRatio, 10)), s's value stopped: each
 * token's log-prob carries the gradient of s as if it were the token's own ratio. No dual clip. */
function gspoTerm(o: Required<PolicyLossOptions>, A: number, logp: number, old: number, seqLogRatio: number): TokenTerm {
  const ratio = Math.exp(Math.min(seqLogRatio, 10));
  const dRatio = seqLogRatio <= 10 ? ratio : 0;
  const lo = 1 - o.clipRatioLow;
  const hi = 1 + o.clipRatioHigh;
  const l1 = -A * ratio;
  const l2 = -A * Math.min(Math.max(ratio, lo), hi);
  const dl1 = -A * dRatio;
  const dl2 = ratio >= lo && ratio <= hi ? dl1 : 0;
  return {
    loss: Math.max(l1, l2),
    dLoss: pick(l1, l2, true) * dl1 + pick(l2, l1, true) * dl2,
    clipped: l2 > l1,
    lower: false,
    negKl: -(logp - old),
  };
}

/** Plain policy gradient, -A logp (GPG: no ratio, no clip). */
function gpgTerm(A: number, logp: number, old: number): TokenTerm {
  return { loss: -logp * A, dLoss: -A, clipped: false, lower: false, negKl: -(logp - old) };
}

/** PPO clip without the ±20 clamp or dual clip; a selected token's term (and gradient) is cut to 0. */
function clipCovTerm(o: Required<PolicyLossOptions>, A: number, logp: number, old: number, selected: boolean): TokenTerm {
  const lo = 1 - o.clipRatioLow;
  const hi = 1 + o.clipRatioHigh;
  const ratio = Math.exp(logp - old);
  const l1 = -A * ratio;
  const l2 = -A * Math.min(Math.max(ratio, lo), hi);
  const dl1 = -A * ratio;
  const dl2 = ratio >= lo && ratio <= hi ? dl1 : 0;
  const corr = selected ? 0 : 1;
  return {
    loss: Math.max(l1, l2) * corr,
    dLoss: (pick(l1, l2, true) * dl1 + pick(l2, l1, true) * dl2) * corr,
    clipped: selected,
    lower: false,
    negKl: -(logp - old),
  };
}

/** Unclipped -A ratio; a selected token adds ppoKlCoef |logp - old|. ppo_kl is the mean |logp - old|. */
function klCovTerm(o: Required<PolicyLossOptions>, A: number, logp: number, old: number, selected: boolean): TokenTerm {
  const diff = logp - old;
  const ratio = Math.exp(diff);
  const pen = selected ? o.ppoKlCoef : 0;
  return {
    loss: -A * ratio + pen * Math.abs(diff),
    dLoss: -A * ratio + pen * Math.sign(diff),
    clipped: false,
    lower: false,
    negKl: Math.abs(diff),
  };
}

/** -sg(clamp(ratio, 1 - ε_low, 1 + ε_high)) A logp: the clipped ratio only weights the gradient of logp. */
function cispoTerm(o: Required<PolicyLossOptions>, A: number, logp: number, old: number): TokenTerm {
  const delta = Math.min(Math.max(logp - old, -20), 20);
  const ratio = Math.exp(delta);
  const weight = Math.min(Math.max(ratio, 1 - o.clipRatioLow), 1 + o.clipRatioHigh);
  return { loss: -weight * A * logp, dLoss: -weight * A, clipped: ratio !== weight, lower: false, negKl: -delta };
}

/** gspo: per row, the masked mean of logp - old (an empty row divides by 1). */
function seqLogRatios(input: PpoLossInput): Float64Array {
  const { rows, cols } = input;
  const out = new Float64Array(rows);
  for (let i = 0; i < rows; i++) {
    let s = 0;
    let len = 0;
    for (let t = i * cols; t < (i + 1) * cols; t++) {
      s += (input.logProbs[t] - input.oldLogProbs[t]) * input.responseMask[t];
      len += input.responseMask[t];
    }
    out[i] = s / Math.max(len, 1);
  }
  return out;
}

/**
 * clip_cov and kl_cov: the tokens singled out by cov = (A - mean A)(logp - mean logp) over all masked tokens
 * of `input` (the whole step), as a 0/1 mask [rows, cols]. All zeros for the other modes.
 * - clip_cov: among the masked tokens whose PPO clip is not active and with clipCovLb < cov < clipCovUb,
 *   max(⌊clipCovRatio · tokens⌋, 1) of them drawn uniformly at random (seeded by `seed`; verl draws with
 *   torch.randperm), or all if fewer.
 * - kl_cov: the max(⌊klCovRatio · tokens⌋, 1) largest cov (ties: the earlier token first).
 */
export function covSelection(
  input: Pick<PpoLossInput, "rows" | "cols" | "logProbs" | "oldLogProbs" | "advantages" | "responseMask">,
  options?: PolicyLossOptions,
  seed = 0,
): Uint8Array {
  const o = resolveLossOptions(options);
  const n = input.rows * input.cols;
  const selected = new Uint8Array(n);
  if (!needsCovSelection(o.lossMode)) return selected;
  const m = input.responseMask;
  const A = input.advantages;
  const lp = input.logProbs;
  const valid: number[] = [];
  for (let k = 0; k < n; k++) if (m[k] > 0) valid.push(k);
  if (valid.length === 0) return selected;
  if (o.lossMode === "clip_cov") {
    // verl's masked_mean (masked sum over Σ mask + 1e-8)
    let tokens = 0;
    let sumA = 0;
    let sumLp = 0;
    for (const k of valid) {
      tokens += m[k];
      sumA += A[k] * m[k];
      sumLp += lp[k] * m[k];
    }
    const meanA = sumA / (tokens + MASKED_MEAN_EPS);
    const meanLp = sumLp / (tokens + MASKED_MEAN_EPS);
    const lo = 1 - o.clipRatioLow;
    const hi = 1 + o.clipRatioHigh;
    const candidates = valid.filter((k) => {
      const ratio = Math.exp(lp[k] - input.oldLogProbs[k]);
      if (-A[k] * Math.min(Math.max(ratio, lo), hi) > -A[k] * ratio) return false; // already clipped by PPO
      const cov = (A[k] - meanA) * (lp[k] - meanLp);
      return cov > o.clipCovLb && cov < o.clipCovUb;
    });
    const take = Math.min(Math.max(Math.floor(o.clipCovRatio * tokens), 1), candidates.length);
    // the first `take` of a uniform random permutation (partial Fisher-Yates)
    const rng = new Rng(seed);
    for (let j = 0; j < take; j++) {
      const r = j + (rng.nextU32() % (candidates.length - j));
      [candidates[j], candidates[r]] = [candidates[r], candidates[j]];
      selected[candidates[j]] = 1;
    }
    return selected;
  }
  // kl_cov: plain means over the masked tokens; a NaN covariance ranks last
  let sumA = 0;
  let sumLp = 0;
  for (const k of valid) {
    sumA += A[k];
    sumLp += lp[k];
  }
  const meanA = sumA / valid.length;
  const meanLp = sumLp / valid.length;
  const cov = new Float64Array(n);
  for (const k of valid) {
    const c = (A[k] - meanA) * (lp[k] - meanLp);
    cov[k] = Number.isNaN(c) ? -Infinity : c;
  }
  const take = Math.max(1, Math.floor(valid.length * o.klCovRatio));
  const order = valid.sort((a, b) => cov[b] - cov[a] || a - b);
  for (let j = 0; j < take; j++) selected[order[j]] = 1;
  return selected;
}

/** The policy loss of `options.lossMode`, its metrics and its per-token gradients. */
export function ppoPolicyLoss(input: PpoLossInput, options?: PolicyLossOptions, norm?: AggNorm): PpoLossResult {
  const o = resolveLossOptions(options);
  const { rows, cols } = input;
  const n = rows * cols;
  for (const key of ["logProbs", "oldLogProbs", "advantages", "responseMask"] as const) {
    if (input[key].length !== n) throw new ValidationError(`${key} has ${input[key].length} elements, expected ${n}`, [key]);
  }
  if (input.covSelected !== undefined && input.covSelected.length !== n)
    throw new ValidationError(`covSelected has ${input.covSelected.length} elements, expected ${n}`, ["covSelected"]);
  if (o.entropyCoeff !== 0 && input.entropy === undefined) throw new ValidationError("entropyCoeff needs per-token entropy", ["entropy"]);
  if (o.klLossCoef !== 0 && input.refLogProbs === undefined)
    throw new ValidationError("klLossCoef needs reference log-probs", ["refLogProbs"]);
  const m = input.responseMask;
  const nrm = norm ?? normFromMask(m, rows, cols);
  const w = aggWeights(m, rows, cols, o.lossAggMode, nrm);
  const wPg = pgAggMode(o) === o.lossAggMode ? w : aggWeights(m, rows, cols, pgAggMode(o), nrm);
  const seqLog = o.lossMode === "gspo" ? seqLogRatios(input) : null;
  const selected = needsCovSelection(o.lossMode) ? (input.covSelected ?? covSelection(input, o)) : null;
  const meanScale = 1 / (nrm.tokens + MASKED_MEAN_EPS);
  const kind = canonicalKl(o.klLossType);

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
    const logp = input.logProbs[k];
    const old = input.oldLogProbs[k];
    let t: TokenTerm;
    switch (o.lossMode) {
      case "vanilla":
        t = vanillaTerm(o, A, logp, old);
        break;
      case "gspo":
        t = gspoTerm(o, A, logp, old, seqLog![Math.floor(k / cols)]);
        break;
      case "gpg":
        t = gpgTerm(A, logp, old);
        break;
      case "clip_cov":
        t = clipCovTerm(o, A, logp, old, selected![k] !== 0);
        break;
      case "kl_cov":
        t = klCovTerm(o, A, logp, old, selected![k] !== 0);
        break;
      case "cispo":
        t = cispoTerm(o, A, logp, old);
        break;
    }
    pg += wPg[k] * t.loss;
    dLogProbs[k] = wPg[k] * t.dLoss;
    ppoKl += t.negKl * m[k] * meanScale;
    if (t.clipped) clip += m[k] * meanScale;
    if (t.lower) clipLower += m[k] * meanScale;
    if (input.entropy !== undefined) ent += w[k] * input.entropy[k];
    dEntropy[k] = -o.entropyCoeff * w[k];
    if (input.refLogProbs !== undefined) {
      const ref = input.refLogProbs[k];
      kl += w[k] * klValue(kind, logp, ref);
      dLogProbs[k] += o.klLossCoef * w[k] * klGrad(kind, logp, ref);
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
