// Advantage estimators, KL penalties and whitening (trace-train.md §9) over flat [B, T] f32 arrays.
// Precision contract: every value is read as f32, all arithmetic is f64, every stored value is rounded
// once to f32. The plain-TS references round at the same points (Math.fround), so outputs agree to the
// last f32 bit except where a sum is accumulated in a different order (two SIMD lanes here).

@inline function ldf(p: usize, i: i32): f64 { return <f64>load<f32>(p + (<usize>i << 2)); }
@inline function stf(p: usize, i: i32, v: f64): void { store<f32>(p + (<usize>i << 2), <f32>v); }
@inline function ldd(p: usize, i: i32): f64 { return load<f64>(p + (<usize>i << 3)); }
@inline function std_(p: usize, i: i32, v: f64): void { store<f64>(p + (<usize>i << 3), v); }
@inline function ldi(p: usize, i: i32): i32 { return load<i32>(p + (<usize>i << 2)); }

/** Four f32 lanes as two f64x2 halves. */
@inline function lo(v: v128): v128 { return f64x2.promote_low_f32x4(v); }
@inline function hi(v: v128): v128 { return f64x2.promote_low_f32x4(v128.shuffle<i32>(v, v, 2, 3, 0, 1)); }
/** Two f64x2 halves rounded back to four f32 lanes. */
@inline function join(a: v128, b: v128): v128 {
  return v128.shuffle<i32>(f32x4.demote_f64x2_zero(a), f32x4.demote_f64x2_zero(b), 0, 1, 4, 5);
}

export const WHITEN_OK: i32 = 0;
export const WHITEN_EMPTY_MASK: i32 = 1;
export const WHITEN_SINGLE_TOKEN: i32 = 2;

/**
 * verl `masked_whiten`: mean and unbiased variance over the masked positions, applied to EVERY position;
 * `zeroPad` multiplies by the mask afterwards. `out` may alias `x`. Returns a WHITEN_* status.
 */
export function maskedWhiten(x: usize, m: usize, n: i32, out: usize, zeroPad: bool): i32 {
  let sm = f64x2.splat(0), sxm = f64x2.splat(0);
  let k = 0;
  for (; k + 4 <= n; k += 4) {
    const xv = v128.load(x + (<usize>k << 2)), mv = v128.load(m + (<usize>k << 2));
    sm = f64x2.add(sm, f64x2.add(lo(mv), hi(mv)));
    sxm = f64x2.add(sxm, f64x2.add(f64x2.mul(lo(xv), lo(mv)), f64x2.mul(hi(xv), hi(mv))));
  }
  let sumM = f64x2.extract_lane(sm, 0) + f64x2.extract_lane(sm, 1);
  let sumXM = f64x2.extract_lane(sxm, 0) + f64x2.extract_lane(sxm, 1);
  for (; k < n; k++) { const mk = ldf(m, k); sumM += mk; sumXM += ldf(x, k) * mk; }
  if (sumM == 0) return WHITEN_EMPTY_MASK;
  if (sumM == 1) return WHITEN_SINGLE_TOKEN;
  const mean = sumXM / (sumM + 1e-8);
  const meanV = f64x2.splat(mean);
  let sc = f64x2.splat(0);
  k = 0;
  for (; k + 4 <= n; k += 4) {
    const xv = v128.load(x + (<usize>k << 2)), mv = v128.load(m + (<usize>k << 2));
    const a = f64x2.sub(lo(xv), meanV), b = f64x2.sub(hi(xv), meanV);
    sc = f64x2.add(sc, f64x2.add(f64x2.mul(f64x2.mul(a, a), lo(mv)), f64x2.mul(f64x2.mul(b, b), hi(mv))));
  }
  let sumC = f64x2.extract_lane(sc, 0) + f64x2.extract_lane(sc, 1);
  for (; k < n; k++) { const d = ldf(x, k) - mean; sumC += d * d * ldf(m, k); }
  const variance = (sumC / (sumM + 1e-8)) * (sumM / (sumM - 1));
  const inv = 1.0 / Math.sqrt(variance + 1e-8);
  const invV = f64x2.splat(inv);
  k = 0;
  for (; k + 4 <= n; k += 4) {
    const xv = v128.load(x + (<usize>k << 2));
    let a = f64x2.mul(f64x2.sub(lo(xv), meanV), invV), b = f64x2.mul(f64x2.sub(hi(xv), meanV), invV);
    if (zeroPad) {
      const mv = v128.load(m + (<usize>k << 2));
      a = f64x2.mul(a, lo(mv)); b = f64x2.mul(b, hi(mv));
    }
    v128.store(out + (<usize>k << 2), join(a, b));
  }
  for (; k < n; k++) {
    let v = (ldf(x, k) - mean) * inv;
    if (zeroPad) v *= ldf(m, k);
    stf(out, k, v);
  }
  return WHITEN_OK;
}

/** out[i, t] = f32(s[i] * m[i, t]) for per-row f64 scalars s. */
function broadcastRows(s: usize, m: usize, B: i32, T: i32, out: usize): void {
  for (let i = 0; i < B; i++) {
    const si = ldd(s, i);
    const sv = f64x2.splat(si);
    const base = <usize>i * <usize>T;
    const mp = m + (base << 2), op = out + (base << 2);
    let t = 0;
    for (; t + 4 <= T; t += 4) {
      const mv = v128.load(mp + (<usize>t << 2));
      v128.store(op + (<usize>t << 2), join(f64x2.mul(sv, lo(mv)), f64x2.mul(sv, hi(mv))));
    }
    for (; t < T; t++) stf(op, t, si * ldf(mp, t));
  }
}

/** s[i] = sum over all T positions of r[i, :] (f64, sequential). */
function rowSums(r: usize, B: i32, T: i32, s: usize): void {
  for (let i = 0; i < B; i++) {
    const p = r + ((<usize>i * <usize>T) << 2);
    let acc: f64 = 0;
    for (let t = 0; t < T; t++) acc += ldf(p, t);
    std_(s, i, acc);
  }
}

/** Group sums and counts of the row scores s (groups are dense ids in [0, G)). */
function groupMeans(s: usize, groups: usize, B: i32, G: i32, gMean: usize, gCount: usize): void {
  memory.fill(gMean, 0, <usize>G << 3);
  memory.fill(gCount, 0, <usize>G << 3);
  for (let i = 0; i < B; i++) {
    const g = ldi(groups, i);
    std_(gMean, g, ldd(gMean, g) + ldd(s, i));
    std_(gCount, g, ldd(gCount, g) + 1);
  }
  for (let g = 0; g < G; g++) {
    const c = ldd(gCount, g);
    if (c > 0) std_(gMean, g, ldd(gMean, g) / c);
  }
}

/** Scratch bytes the group estimators need: f64 row scores [B] + five f64 [G] arrays. */
export function groupScratchBytes(B: i32, G: i32): i32 { return (B + 5 * G) << 3; }

export const EST_GRPO: i32 = 0;
export const EST_GRPO_NO_STD: i32 = 1;
export const EST_RLOO: i32 = 2;
export const EST_RPP_BASELINE: i32 = 3;
export const EST_OPO: i32 = 4;
export const EST_GPG: i32 = 5;
export const EST_PASSK: i32 = 6;
export const EST_PASSK_NO_STD: i32 = 7;
/** groupAdvantage's return when every group was valid. */
export const GROUP_OK: i32 = -1;

/** Unbiased std of each group's row scores into gStd (1 for a group of fewer than two rows). */
function groupStds(s: usize, groups: usize, B: i32, G: i32, gMean: usize, gCount: usize, gStd: usize): void {
  memory.fill(gStd, 0, <usize>G << 3);
  for (let i = 0; i < B; i++) {
    const g = ldi(groups, i);
    const d = ldd(s, i) - ldd(gMean, g);
    std_(gStd, g, ldd(gStd, g) + d * d);
  }
  for (let g = 0; g < G; g++) {
    const c = ldd(gCount, g);
    std_(gStd, g, c > 1 ? Math.sqrt(ldd(gStd, g) / (c - 1)) : 1.0);
  }
}

/**
 * OPO's baseline per group: the response-length-weighted mean score, sum(len_i * s_i) / sum(len_i), into
 * gBase (0 for a singleton, and for a group whose responses are all empty, where verl would divide 0 by 0).
 */
function opoBaselines(s: usize, m: usize, groups: usize, B: i32, T: i32, G: i32, gCount: usize, gLen: usize, gBase: usize): void {
  memory.fill(gLen, 0, <usize>G << 3);
  memory.fill(gBase, 0, <usize>G << 3);
  for (let i = 0; i < B; i++) {
    const p = m + ((<usize>i * <usize>T) << 2);
    let len: f64 = 0;
    for (let t = 0; t < T; t++) len += ldf(p, t);
    const g = ldi(groups, i);
    std_(gLen, g, ldd(gLen, g) + len);
    std_(gBase, g, ldd(gBase, g) + len * ldd(s, i));
  }
  for (let g = 0; g < G; g++) {
    const l = ldd(gLen, g);
    std_(gBase, g, ldd(gCount, g) > 1 && l > 0 ? ldd(gBase, g) / l : 0.0);
  }
}

/**
 * Pass@k (GRPO-style): per group, only the best row (the first holding the maximum) gets an advantage,
 * max - second max, divided by the group's std + eps when `norm`. Rows' scores in `s` are overwritten.
 * Returns the first group with a single row (pass@k needs two), or GROUP_OK.
 */
function passkAdvantage(s: usize, groups: usize, B: i32, G: i32, eps: f64, norm: bool,
  gMean: usize, gCount: usize, gStd: usize, gBest: usize, gSecond: usize): i32 {
  for (let g = 0; g < G; g++) {
    const c = ldd(gCount, g);
    if (c == 1) return g;
    std_(gBest, g, -1);
    std_(gSecond, g, -Infinity);
  }
  if (norm) groupStds(s, groups, B, G, gMean, gCount, gStd);
  // best row index (first maximum) per group, then the largest score among the group's other rows
  for (let i = 0; i < B; i++) {
    const g = ldi(groups, i);
    const b = <i32>ldd(gBest, g);
    if (b < 0 || ldd(s, i) > ldd(s, b)) std_(gBest, g, <f64>i);
  }
  for (let i = 0; i < B; i++) {
    const g = ldi(groups, i);
    if (i != <i32>ldd(gBest, g) && ldd(s, i) > ldd(gSecond, g)) std_(gSecond, g, ldd(s, i));
  }
  for (let i = 0; i < B; i++) {
    const g = ldi(groups, i);
    let a: f64 = 0;
    if (i == <i32>ldd(gBest, g)) {
      a = ldd(s, i) - ldd(gSecond, g);
      if (norm) a = a / (ldd(gStd, g) + eps);
    }
    std_(s, i, a);
  }
  return GROUP_OK;
}

/**
 * Outcome estimators with a group baseline: GRPO (std-normalised or Dr.GRPO), RLOO, the REINFORCE++-baseline
 * pre-whitening scores, OPO, GPG and pass@k. Writes advantages (= returns) into `out`. Returns GROUP_OK, or
 * for pass@k the first group of a single row (nothing written).
 */
export function groupAdvantage(kind: i32, r: usize, m: usize, groups: usize, B: i32, T: i32, G: i32,
  eps: f64, out: usize, scratch: usize): i32 {
  const s = scratch;
  const gMean = s + (<usize>B << 3), gCount = gMean + (<usize>G << 3), gStd = gCount + (<usize>G << 3);
  const gX = gStd + (<usize>G << 3), gY = gX + (<usize>G << 3);
  rowSums(r, B, T, s);
  groupMeans(s, groups, B, G, gMean, gCount);
  if (kind == EST_PASSK || kind == EST_PASSK_NO_STD) {
    const bad = passkAdvantage(s, groups, B, G, eps, kind == EST_PASSK, gMean, gCount, gStd, gX, gY);
    if (bad != GROUP_OK) return bad;
    broadcastRows(s, m, B, T, out);
    return GROUP_OK;
  }
  if (kind == EST_GRPO) groupStds(s, groups, B, G, gMean, gCount, gStd);
  if (kind == EST_OPO) opoBaselines(s, m, groups, B, T, G, gCount, gX, gY);
  // GPG scales by the batch size over the rows with a non-zero score (at least one)
  let alpha: f64 = 1;
  if (kind == EST_GPG) {
    let nonzero = 0;
    for (let i = 0; i < B; i++) if (ldd(s, i) != 0) nonzero++;
    alpha = <f64>B / <f64>(nonzero > 1 ? nonzero : 1);
  }
  for (let i = 0; i < B; i++) {
    const g = ldi(groups, i);
    const c = ldd(gCount, g);
    const si = ldd(s, i);
    const mean = c > 1 ? ldd(gMean, g) : 0.0;
    let a: f64;
    if (kind == EST_GRPO) a = (si - mean) / (ldd(gStd, g) + eps);
    else if (kind == EST_RLOO) a = c > 1 ? si * c / (c - 1) - mean * c / (c - 1) : si;
    else if (kind == EST_OPO) a = si - ldd(gY, g);
    else if (kind == EST_GPG) a = alpha * (si - mean);
    else a = si - mean;
    std_(s, i, a);
  }
  broadcastRows(s, m, B, T, out);
  return GROUP_OK;
}

/** GAE (masked, modern verl): raw advantages into `adv`, returns = A + V into `ret`. Whitening is separate. */
export function gae(r: usize, v: usize, m: usize, B: i32, T: i32, gamma: f64, lam: f64, adv: usize, ret: usize): void {
  for (let i = 0; i < B; i++) {
    const base = (<usize>i * <usize>T) << 2;
    const rp = r + base, vp = v + base, mp = m + base, ap = adv + base, tp = ret + base;
    let nextV: f64 = 0, lastA: f64 = 0;
    for (let t = T - 1; t >= 0; t--) {
      const vt = ldf(vp, t), mt = ldf(mp, t);
      const delta = ldf(rp, t) + gamma * nextV - vt;
      const a = delta + gamma * lam * lastA;
      nextV = vt * mt + (1 - mt) * nextV;
      lastA = a * mt + (1 - mt) * lastA;
      stf(ap, t, lastA);
      stf(tp, t, lastA + vt);
    }
  }
}

/** REINFORCE++ discounted returns with reset beyond EOS (whitening is separate). */
export function discountedReturns(r: usize, m: usize, B: i32, T: i32, gamma: f64, ret: usize): void {
  for (let i = 0; i < B; i++) {
    const base = (<usize>i * <usize>T) << 2;
    const rp = r + base, mp = m + base, tp = ret + base;
    let run: f64 = 0;
    for (let t = T - 1; t >= 0; t--) {
      run = ldf(rp, t) + gamma * run;
      stf(tp, t, run);
      run = run * ldf(mp, t);
    }
  }
}

/** ReMax: returns = reverse cumsum of r*m; advantages = returns - b*m. */
export function remax(r: usize, m: usize, b: usize, B: i32, T: i32, adv: usize, ret: usize): void {
  for (let i = 0; i < B; i++) {
    const base = (<usize>i * <usize>T) << 2;
    const rp = r + base, mp = m + base, ap = adv + base, tp = ret + base;
    const bi = ldf(b, i);
    let run: f64 = 0;
    for (let t = T - 1; t >= 0; t--) {
      const mt = ldf(mp, t);
      run += ldf(rp, t) * mt;
      const rt = <f64><f32>run;
      stf(tp, t, rt);
      stf(ap, t, rt - bi * mt);
    }
  }
}

export const KL_K1: i32 = 0;
export const KL_ABS: i32 = 1;
export const KL_K2: i32 = 2;
export const KL_K3: i32 = 3;

@inline function klScalar(kind: i32, lp: f64, rf: f64): f64 {
  if (kind == KL_K1) return lp - rf;
  if (kind == KL_ABS) return Math.abs(lp - rf);
  if (kind == KL_K2) { const d = lp - rf; return 0.5 * d * d; }
  const x = Math.min(Math.max(rf - lp, -20.0), 20.0);
  return Math.min(Math.max(Math.exp(x) - x - 1, -10.0), 10.0);
}

/**
 * exp on two f64 lanes for |x| <= 20 (the k3 clamp): x = n ln2 + r with Cody-Waite ln2 split, a degree-13
 * Taylor polynomial for e^r (|r| <= ln2/2, truncation < 2e-16), and 2^n built from the exponent bits.
 * Agrees with Math.exp to a few ulp, far inside the f32 outputs' precision.
 */
@inline function expV(x: v128): v128 {
  // round-to-nearest via the 1.5 * 2^52 shifter: t's low mantissa bits hold n as an integer
  const SHIFTER = f64x2.splat(6755399441055744.0);
  const t = f64x2.add(f64x2.mul(x, f64x2.splat(1.4426950408889634)), SHIFTER);
  const n = f64x2.sub(t, SHIFTER);
  const r = f64x2.sub(f64x2.sub(x, f64x2.mul(n, f64x2.splat(6.93147180369123816490e-01))), f64x2.mul(n, f64x2.splat(1.90821492927058770002e-10)));
  let p = f64x2.splat(1.0 / 6227020800.0); // 1/13!
  p = f64x2.add(f64x2.mul(p, r), f64x2.splat(1.0 / 479001600.0));
  p = f64x2.add(f64x2.mul(p, r), f64x2.splat(1.0 / 39916800.0));
  p = f64x2.add(f64x2.mul(p, r), f64x2.splat(1.0 / 3628800.0));
  p = f64x2.add(f64x2.mul(p, r), f64x2.splat(1.0 / 362880.0));
  p = f64x2.add(f64x2.mul(p, r), f64x2.splat(1.0 / 40320.0));
  p = f64x2.add(f64x2.mul(p, r), f64x2.splat(1.0 / 5040.0));
  p = f64x2.add(f64x2.mul(p, r), f64x2.splat(1.0 / 720.0));
  p = f64x2.add(f64x2.mul(p, r), f64x2.splat(1.0 / 120.0));
  p = f64x2.add(f64x2.mul(p, r), f64x2.splat(1.0 / 24.0));
  p = f64x2.add(f64x2.mul(p, r), f64x2.splat(1.0 / 6.0));
  p = f64x2.add(f64x2.mul(p, r), f64x2.splat(0.5));
  p = f64x2.add(f64x2.mul(p, r), f64x2.splat(1.0));
  p = f64x2.add(f64x2.mul(p, r), f64x2.splat(1.0));
  const bits = i64x2.shl(i64x2.add(t, i64x2.splat(1023)), 52); // 2^n: (n + 1023) into the exponent field
  return f64x2.mul(p, bits);
}

/** kl_penalty on two f64 lanes. */
@inline function klV(kind: i32, lp: v128, rf: v128): v128 {
  const d = f64x2.sub(lp, rf);
  if (kind == KL_K1) return d;
  if (kind == KL_ABS) return f64x2.abs(d);
  if (kind == KL_K2) return f64x2.mul(f64x2.mul(f64x2.splat(0.5), d), d);
  // pmin/pmax (one instruction each) equal min/max for the finite inputs log-probs are
  const x = f64x2.pmin(f64x2.pmax(f64x2.neg(d), f64x2.splat(-20.0)), f64x2.splat(20.0));
  const k = f64x2.sub(f64x2.sub(expV(x), x), f64x2.splat(1.0));
  return f64x2.pmin(f64x2.pmax(k, f64x2.splat(-10.0)), f64x2.splat(10.0));
}

/** Elementwise kl_penalty(logp, ref, kind) into `out`. */
export function klPenalty(kind: i32, logp: usize, ref: usize, n: i32, out: usize): void {
  let k = 0;
  for (; k + 4 <= n; k += 4) {
    const a = v128.load(logp + (<usize>k << 2)), b = v128.load(ref + (<usize>k << 2));
    v128.store(out + (<usize>k << 2), join(klV(kind, lo(a), lo(b)), klV(kind, hi(a), hi(b))));
  }
  for (; k < n; k++) stf(out, k, klScalar(kind, ldf(logp, k), ldf(ref, k)));
}

/**
 * In-reward KL (verl apply_kl_penalty): kld = f32(f32(kl(old, ref)) * m); rewards = scores - beta * kld.
 * Returns current_kl = mean over rows of masked_mean(kld_i, m_i).
 */
export function applyKlPenalty(kind: i32, scores: usize, logp: usize, ref: usize, m: usize, B: i32, T: i32,
  beta: f64, rewards: usize): f64 {
  let total: f64 = 0;
  const betaV = f64x2.splat(beta);
  for (let i = 0; i < B; i++) {
    const base = (<usize>i * <usize>T) << 2;
    const sp = scores + base, lp = logp + base, rp = ref + base, mp = m + base, op = rewards + base;
    let sk = f64x2.splat(0), sm = f64x2.splat(0);
    let t = 0;
    for (; t + 4 <= T; t += 4) {
      const o = <usize>t << 2;
      const a = v128.load(lp + o), b = v128.load(rp + o), mv = v128.load(mp + o), s = v128.load(sp + o);
      const kl = join(klV(kind, lo(a), lo(b)), klV(kind, hi(a), hi(b)));
      const kld = join(f64x2.mul(lo(kl), lo(mv)), f64x2.mul(hi(kl), hi(mv)));
      v128.store(op + o, join(f64x2.sub(lo(s), f64x2.mul(betaV, lo(kld))), f64x2.sub(hi(s), f64x2.mul(betaV, hi(kld)))));
      sk = f64x2.add(sk, f64x2.add(f64x2.mul(lo(kld), lo(mv)), f64x2.mul(hi(kld), hi(mv))));
      sm = f64x2.add(sm, f64x2.add(lo(mv), hi(mv)));
    }
    let sumK = f64x2.extract_lane(sk, 0) + f64x2.extract_lane(sk, 1);
    let sumM = f64x2.extract_lane(sm, 0) + f64x2.extract_lane(sm, 1);
    for (; t < T; t++) {
      const mt = ldf(mp, t);
      const kld = <f64><f32>(<f64><f32>klScalar(kind, ldf(lp, t), ldf(rp, t)) * mt);
      stf(op, t, ldf(sp, t) - beta * kld);
      sumK += kld * mt;
      sumM += mt;
    }
    total += sumK / (sumM + 1e-8);
  }
  return B > 0 ? total / B : 0;
}

/** out[i, t] = f32(scalars[rowIndex[i]] * m[i, t]): rollout-level broadcast (§9.8 step 5). */
export function broadcastScalars(scalars: usize, rowIndex: usize, m: usize, B: i32, T: i32, out: usize, scratch: usize): void {
  for (let i = 0; i < B; i++) std_(scratch, i, ldf(scalars, ldi(rowIndex, i)));
  broadcastRows(scratch, m, B, T, out);
}

/**
 * For each row: the first masked value of x, and whether every masked value is allclose to it
 * (|v - first| <= atol + rtol * |first|, torch.allclose). ok[i] = 0 empty mask, 1 all close, 2 not close.
 */
export function rowScalars(x: usize, m: usize, B: i32, T: i32, rtol: f64, atol: f64, first: usize, ok: usize): void {
  for (let i = 0; i < B; i++) {
    const base = (<usize>i * <usize>T) << 2;
    const xp = x + base, mp = m + base;
    let state: u8 = 0;
    let f: f64 = 0;
    for (let t = 0; t < T; t++) {
      if (ldf(mp, t) == 0) continue;
      const v = ldf(xp, t);
      if (state == 0) { f = v; state = 1; }
      else if (!(Math.abs(v - f) <= atol + rtol * Math.abs(f))) { state = 2; break; }
    }
    stf(first, i, f);
    store<u8>(ok + <usize>i, state);
  }
}

/** Row sums into f32 (the per-row scalar reward of a token-level reward tensor). */
export function rowSumsF32(r: usize, B: i32, T: i32, out: usize): void {
  for (let i = 0; i < B; i++) {
    const p = r + ((<usize>i * <usize>T) << 2);
    let acc: f64 = 0;
    for (let t = 0; t < T; t++) acc += ldf(p, t);
    stf(out, i, acc);
  }
}
