/**
 * Plain-TS references for the advantage estimators, KL penalties and whitening (docs/training.md).
 * Written for clarity: one formula per line, sequential f64 arithmetic, f32 rounding (Math.fround) exactly
 * where the Wasm kernels store a value. Used as the oracle in tests and the baseline in bench/wasm.ts.
 */
import { ValidationError } from "../../types/errors.ts";
import { klValue } from "../kl.ts";
import { groupCount, checkLength, checkTokens, passkSingleton } from "../validate.ts";
import type { AdvantageOutput, GroupedInput, KlKind, TokenInput } from "../types.ts";

const f32 = Math.fround;

/** verl masked_whiten: (x - mean) / sqrt(unbiased var + 1e-8) over masked positions, applied everywhere. */
export function maskedWhiten(x: Float32Array, m: Float32Array, zeroPad = false): Float32Array {
  checkLength("mask", m, x.length);
  let sumM = 0,
    sumXM = 0;
  for (let k = 0; k < x.length; k++) {
    sumM += m[k];
    sumXM += x[k] * m[k];
  }
  if (sumM === 0) throw new ValidationError("masked_whiten: the mask is empty");
  if (sumM === 1) throw new ValidationError("masked_whiten: at least two masked tokens are needed for an unbiased variance");
  const mean = sumXM / (sumM + 1e-8);
  let sumC = 0;
  for (let k = 0; k < x.length; k++) {
    const d = x[k] - mean;
    sumC += d * d * m[k];
  }
  const variance = (sumC / (sumM + 1e-8)) * (sumM / (sumM - 1));
  const inv = 1 / Math.sqrt(variance + 1e-8);
  const out = new Float32Array(x.length);
  for (let k = 0; k < x.length; k++) out[k] = f32(zeroPad ? (x[k] - mean) * inv * m[k] : (x[k] - mean) * inv);
  return out;
}

/** Sum of each row over all T positions. */
export function rowSums(x: Float32Array, B: number, T: number): Float64Array {
  const s = new Float64Array(B);
  for (let i = 0; i < B; i++) for (let t = 0; t < T; t++) s[i] += x[i * T + t];
  return s;
}

/** out[i, t] = a[i] * m[i, t]. */
function broadcast(a: ArrayLike<number>, m: Float32Array, B: number, T: number): Float32Array {
  const out = new Float32Array(B * T);
  for (let i = 0; i < B; i++) for (let t = 0; t < T; t++) out[i * T + t] = f32(a[i] * m[i * T + t]);
  return out;
}

interface GroupStats {
  mean: number[];
  count: number[];
  std: number[];
}
function groupStats(s: Float64Array, groups: Int32Array, G: number): GroupStats {
  const members: number[][] = Array.from({ length: G }, () => []);
  s.forEach((v, i) => members[groups[i]].push(v));
  const mean = members.map((xs) => (xs.length > 0 ? xs.reduce((a, b) => a + b, 0) / xs.length : 0));
  const std = members.map((xs, g) => {
    if (xs.length < 2) return 1; // a singleton group: mean 0, std 1
    const ss = xs.reduce((a, v) => a + (v - mean[g]) * (v - mean[g]), 0);
    return Math.sqrt(ss / (xs.length - 1));
  });
  return { mean, count: members.map((xs) => xs.length), std };
}

/** Per-row score s_i = sum of rewards, its group's stats, a scalar per row from `f`, broadcast under the mask. */
function perRowFromGroup(x: GroupedInput, f: (s: number, mean: number, n: number, std: number) => number): Float32Array {
  const G = groupCount(x);
  const s = rowSums(x.rewards, x.B, x.T);
  const g = groupStats(s, x.groups, G);
  const a = Array.from(s, (si, i) => f(si, g.mean[x.groups[i]], g.count[x.groups[i]], g.std[x.groups[i]]));
  return broadcast(a, x.mask, x.B, x.T);
}

/** GRPO: (s - mean) / (std + eps), or s - mean without std normalisation (Dr.GRPO). Singletons: mean 0, std 1. */
export function grpo(x: GroupedInput, normByStd = true, epsilon = 1e-6): AdvantageOutput {
  const advantages = perRowFromGroup(x, (si, mean, n, std) => {
    const m = n > 1 ? mean : 0;
    return normByStd ? (si - m) / (std + epsilon) : si - m;
  });
  return { advantages, returns: advantages };
}

/** RLOO: s minus the mean of the others (as upstream writes it); singletons keep s. */
export function rloo(x: GroupedInput): AdvantageOutput {
  const advantages = perRowFromGroup(x, (si, mean, n) => (n > 1 ? (si * n) / (n - 1) - (mean * n) / (n - 1) : si));
  return { advantages, returns: advantages };
}

/** Pass@k (GRPO-style): each group's best row (first maximum) gets max − second max, ÷ (std + eps) when normByStd; the rest 0. */
export function grpoPassk(x: GroupedInput, normByStd = true, epsilon = 1e-6): AdvantageOutput {
  const G = groupCount(x);
  const s = rowSums(x.rewards, x.B, x.T);
  const g = groupStats(s, x.groups, G);
  const single = g.count.findIndex((c) => c === 1);
  if (single >= 0) throw passkSingleton(single);
  const a = new Float64Array(x.B);
  for (let k = 0; k < G; k++) {
    const rows = [...x.groups.keys()].filter((i) => x.groups[i] === k);
    if (rows.length === 0) continue;
    const best = rows.reduce((b, i) => (s[i] > s[b] ? i : b));
    const second = Math.max(...rows.filter((i) => i !== best).map((i) => s[i]));
    a[best] = normByStd ? (s[best] - second) / (g.std[k] + epsilon) : s[best] - second;
  }
  const advantages = broadcast(a, x.mask, x.B, x.T);
  return { advantages, returns: advantages };
}

/** OPO: score minus the group's mean score weighted by response length (masked tokens); singletons keep their score. */
export function opo(x: GroupedInput): AdvantageOutput {
  const G = groupCount(x);
  const s = rowSums(x.rewards, x.B, x.T);
  const len = rowSums(x.mask, x.B, x.T);
  const weighted = new Float64Array(G),
    total = new Float64Array(G),
    count = new Float64Array(G);
  for (let i = 0; i < x.B; i++) {
    weighted[x.groups[i]] += len[i] * s[i];
    total[x.groups[i]] += len[i];
    count[x.groups[i]]++;
  }
  // a group whose responses are all empty has no baseline (upstream divides 0 by 0; its rows are masked anyway)
  const baseline = Array.from(weighted, (w, k) => (count[k] > 1 && total[k] > 0 ? w / total[k] : 0));
  const advantages = broadcast(
    Array.from(s, (si, i) => si - baseline[x.groups[i]]),
    x.mask,
    x.B,
    x.T,
  );
  return { advantages, returns: advantages };
}

/** GPG: (score − group mean) scaled by α = rows / rows with a non-zero score (at least 1); singletons: mean 0. */
export function gpg(x: GroupedInput): AdvantageOutput {
  const nonzero = rowSums(x.rewards, x.B, x.T).filter((v) => v !== 0).length;
  const alpha = x.B / Math.max(nonzero, 1);
  const advantages = perRowFromGroup(x, (si, mean, n) => alpha * (si - (n > 1 ? mean : 0)));
  return { advantages, returns: advantages };
}

/** REINFORCE++ with a group-mean baseline, whitened over the batch. */
export function reinforcePlusPlusBaseline(x: GroupedInput): AdvantageOutput {
  const tiled = perRowFromGroup(x, (si, mean, n) => si - (n > 1 ? mean : 0));
  const advantages = maskedWhiten(tiled, x.mask, true);
  return { advantages, returns: advantages };
}

/** GAE with the mask-aware carries of modern verl; advantages whitened over the masked positions. */
export function gae(x: TokenInput & { values: Float32Array }, gamma: number, lam: number): AdvantageOutput {
  checkTokens(x);
  checkLength("values", x.values, x.B * x.T);
  const { B, T, rewards: r, values: V, mask: m } = x;
  const raw = new Float32Array(B * T);
  const returns = new Float32Array(B * T);
  for (let i = 0; i < B; i++) {
    let nextV = 0,
      lastA = 0;
    for (let t = T - 1; t >= 0; t--) {
      const k = i * T + t;
      const delta = r[k] + gamma * nextV - V[k];
      const a = delta + gamma * lam * lastA;
      nextV = V[k] * m[k] + (1 - m[k]) * nextV;
      lastA = a * m[k] + (1 - m[k]) * lastA;
      raw[k] = f32(lastA);
      returns[k] = f32(lastA + V[k]);
    }
  }
  return { advantages: maskedWhiten(raw, m), returns };
}

/** REINFORCE++: discounted returns reset beyond EOS, whitened and masked. */
export function reinforcePlusPlus(x: TokenInput, gamma: number): AdvantageOutput {
  checkTokens(x);
  const { B, T, rewards: r, mask: m } = x;
  const returns = new Float32Array(B * T);
  for (let i = 0; i < B; i++) {
    let run = 0;
    for (let t = T - 1; t >= 0; t--) {
      run = r[i * T + t] + gamma * run;
      returns[i * T + t] = f32(run);
      run = run * m[i * T + t];
    }
  }
  return { advantages: maskedWhiten(returns, m, true), returns };
}

/** ReMax: returns = reverse cumsum of r*m; advantages = returns - baseline * m. */
export function remax(x: TokenInput & { baselines: Float32Array }): AdvantageOutput {
  checkTokens(x);
  checkLength("baselines", x.baselines, x.B);
  const { B, T, rewards: r, mask: m, baselines: b } = x;
  const returns = new Float32Array(B * T);
  const advantages = new Float32Array(B * T);
  for (let i = 0; i < B; i++) {
    let run = 0;
    for (let t = T - 1; t >= 0; t--) {
      const k = i * T + t;
      run += r[k] * m[k];
      returns[k] = f32(run);
      advantages[k] = f32(returns[k] - b[i] * m[k]);
    }
  }
  return { advantages, returns };
}

export function klPenalty(logp: Float32Array, ref: Float32Array, kind: KlKind): Float32Array {
  checkLength("ref", ref, logp.length);
  const out = new Float32Array(logp.length);
  for (let k = 0; k < logp.length; k++) out[k] = klValue(kind, logp[k], ref[k]);
  return out;
}

/** verl apply_kl_penalty: rewards = scores - beta * kl * m; current_kl = mean over rows of the masked mean. */
export function applyKlPenalty(
  x: { scores: Float32Array; logp: Float32Array; ref: Float32Array; mask: Float32Array; B: number; T: number },
  kind: KlKind,
  beta: number,
): { rewards: Float32Array; currentKl: number } {
  checkTokens({ rewards: x.scores, mask: x.mask, B: x.B, T: x.T });
  checkLength("logp", x.logp, x.B * x.T);
  checkLength("ref", x.ref, x.B * x.T);
  const rewards = new Float32Array(x.B * x.T);
  let total = 0;
  for (let i = 0; i < x.B; i++) {
    let sumK = 0,
      sumM = 0;
    for (let t = 0; t < x.T; t++) {
      const k = i * x.T + t;
      const kld = f32(f32(klValue(kind, x.logp[k], x.ref[k])) * x.mask[k]);
      rewards[k] = f32(x.scores[k] - beta * kld);
      sumK += kld * x.mask[k];
      sumM += x.mask[k];
    }
    total += sumK / (sumM + 1e-8);
  }
  return { rewards, currentKl: x.B > 0 ? total / x.B : 0 };
}

export function broadcastScalars(scalars: Float32Array, rowIndex: Int32Array, m: Float32Array, B: number, T: number): Float32Array {
  checkLength("rowIndex", rowIndex, B);
  checkLength("mask", m, B * T);
  return broadcast(
    Array.from(rowIndex, (j) => scalars[j]),
    m,
    B,
    T,
  );
}

/** First masked value of each row and whether all masked values are allclose to it (torch.allclose). */
export function rowScalars(x: Float32Array, m: Float32Array, B: number, T: number, rtol = 1e-5, atol = 1e-8) {
  checkLength("x", x, B * T);
  checkLength("mask", m, B * T);
  const first = new Float32Array(B);
  const status = new Uint8Array(B);
  for (let i = 0; i < B; i++) {
    const vals: number[] = [];
    for (let t = 0; t < T; t++) if (m[i * T + t] !== 0) vals.push(x[i * T + t]);
    if (vals.length === 0) continue;
    first[i] = vals[0];
    status[i] = vals.every((v) => Math.abs(v - vals[0]) <= atol + rtol * Math.abs(vals[0])) ? 1 : 2;
  }
  return { first, status };
}
