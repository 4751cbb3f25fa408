// Causal grouped-query attention over q [B,T,H*hd], k/v [B,T,KV*hd], mask i32 [B,T] (the reference's layout
// and visibility: key j is visible to query i iff j == i or (j < i and mask[j] == 1)), its backward, and
// single-query decode against a KV cache. Accumulation rule: dot products in f32x4 lanes (+ fixed-order lane
// sum), exp in f32 (exp4), the softmax denominator and the backward's row dot in f64, every vector
// accumulation (out, dq, dk, dv) in f32. When hd is a multiple of 4, keys go four at a time (dot4, axpy4):
// the same per-element operations in the same order, so the same bits, with a quarter of the lane sums
// and of the loads/stores of the accumulated row (what dominates at small head dims such as 16).
import { exp4, hsum, madd } from "./simd";

/**
 * The four dot products q·k0..q·k3 (hd a multiple of 4) as one f32x4, each lane summed exactly as `dot`
 * does: lanes accumulated over d, then (l0 + l1) + (l2 + l3).
 */
@inline function dot4(q: usize, k0: usize, k1: usize, k2: usize, k3: usize, hd: i32): v128 {
  let a = f32x4.splat(0), b = f32x4.splat(0), c = f32x4.splat(0), e = f32x4.splat(0);
  for (let d = 0; d < hd; d += 4) {
    const o = <usize>d << 2;
    const x = v128.load(q + o);
    a = madd(a, x, v128.load(k0 + o));
    b = madd(b, x, v128.load(k1 + o));
    c = madd(c, x, v128.load(k2 + o));
    e = madd(e, x, v128.load(k3 + o));
  }
  // [a0+a1, a2+a3, b0+b1, b2+b3] and the same for c, e; then the pair sums of those, lane by lane
  const ab = f32x4.add(v128.shuffle<f32>(a, b, 0, 2, 4, 6), v128.shuffle<f32>(a, b, 1, 3, 5, 7));
  const ce = f32x4.add(v128.shuffle<f32>(c, e, 0, 2, 4, 6), v128.shuffle<f32>(c, e, 1, 3, 5, 7));
  return f32x4.add(v128.shuffle<f32>(ab, ce, 0, 2, 4, 6), v128.shuffle<f32>(ab, ce, 1, 3, 5, 7));
}

/**
 * y += p0 x0 + p1 x1 + p2 x2 + p3 x3 added key by key, as four axpy calls would, y kept in a register. Keys
 * whose lane of `live` is 0 are skipped, as the one-key loops skip them (a skipped +0 term would turn a -0
 * of y into +0: skipping keeps the same bits).
 */
@inline function axpy4(y: usize, p: v128, live: v128, x0: usize, x1: usize, x2: usize, x3: usize, hd: i32): void {
  if (!i32x4.all_true(live)) {
    if (i32x4.extract_lane(live, 0) != 0) axpy(y, f32x4.extract_lane(p, 0), x0, hd);
    if (i32x4.extract_lane(live, 1) != 0) axpy(y, f32x4.extract_lane(p, 1), x1, hd);
    if (i32x4.extract_lane(live, 2) != 0) axpy(y, f32x4.extract_lane(p, 2), x2, hd);
    if (i32x4.extract_lane(live, 3) != 0) axpy(y, f32x4.extract_lane(p, 3), x3, hd);
    return;
  }
  const c0 = f32x4.splat(f32x4.extract_lane(p, 0)), c1 = f32x4.splat(f32x4.extract_lane(p, 1));
  const c2 = f32x4.splat(f32x4.extract_lane(p, 2)), c3 = f32x4.splat(f32x4.extract_lane(p, 3));
  for (let d = 0; d < hd; d += 4) {
    const o = <usize>d << 2;
    let acc = v128.load(y + o);
    acc = madd(acc, c0, v128.load(x0 + o));
    acc = madd(acc, c1, v128.load(x1 + o));
    acc = madd(acc, c2, v128.load(x2 + o));
    acc = madd(acc, c3, v128.load(x3 + o));
    v128.store(y + o, acc);
  }
}

@inline function dot(a: usize, b: usize, hd: i32): f32 {
  const h4 = hd & ~3;
  let s = f32x4.splat(0);
  for (let d = 0; d < h4; d += 4) s = madd(s, v128.load(a + (<usize>d << 2)), v128.load(b + (<usize>d << 2)));
  let r = hsum(s);
  for (let d = h4; d < hd; d++) r += load<f32>(a + (<usize>d << 2)) * load<f32>(b + (<usize>d << 2));
  return r;
}

/** y[0..hd) += c x[0..hd). */
@inline function axpy(y: usize, c: f32, x: usize, hd: i32): void {
  const h4 = hd & ~3;
  const cv = f32x4.splat(c);
  for (let d = 0; d < h4; d += 4) {
    const o = <usize>d << 2;
    v128.store(y + o, madd(v128.load(y + o), cv, v128.load(x + o)));
  }
  for (let d = h4; d < hd; d++) {
    const o = <usize>d << 2;
    store<f32>(y + o, load<f32>(y + o) + c * load<f32>(x + o));
  }
}

/**
 * Turns row[0..n) of scaled scores (-inf where not visible) into probabilities in place: e = exp(s - max)
 * in f32, sum in f64, p = e / sum. Returns nothing; -inf entries become 0.
 */
function softmaxRow(row: usize, n: i32, max: f32): void {
  const m4 = f32x4.splat(max);
  const n4 = n & ~3;
  let sum = 0.0;
  for (let j = 0; j < n4; j += 4) {
    const o = <usize>j << 2;
    const e = exp4(f32x4.sub(v128.load(row + o), m4));
    v128.store(row + o, e);
    sum += <f64>hsum(e);
  }
  for (let j = n4; j < n; j++) {
    const o = <usize>j << 2;
    const e = f32x4.extract_lane(exp4(f32x4.splat(load<f32>(row + o) - max)), 0);
    store<f32>(row + o, e);
    sum += <f64>e;
  }
  const s4 = f32x4.splat(<f32>sum);
  for (let j = 0; j < n4; j += 4) {
    const o = <usize>j << 2;
    v128.store(row + o, f32x4.div(v128.load(row + o), s4));
  }
  const sf = <f32>sum;
  for (let j = n4; j < n; j++) {
    const o = <usize>j << 2;
    store<f32>(row + o, load<f32>(row + o) / sf);
  }
}

/**
 * out [B,T,H*hd]; probs [B,H,T,T] (0 where not visible) when keepProbs, else `scratch` holds T floats.
 * Only the units [u0, u1) of (batch row, kv head) pairs, u = b*KV + kvh (each with its group of query
 * heads), so threads can split batch rows and heads; no output depends on the split.
 */
export function attention(
  q: usize, k: usize, v: usize, mask: usize, out: usize, probs: usize, keepProbs: bool, scratch: usize,
  B: i32, T: i32, H: i32, KV: i32, hd: i32, u0: i32, u1: i32,
): void {
  const group = H / KV;
  const scale = <f32>(1.0 / Math.sqrt(<f64>hd));
  const scale4 = f32x4.splat(scale), ninf4 = f32x4.splat(-Infinity);
  const vec = (hd & 3) == 0;
  for (let u = u0; u < u1; u++) {
    const b = u / KV, kvh = u % KV;
    for (let h = kvh * group; h < (kvh + 1) * group; h++) {
      for (let i = 0; i < T; i++) {
        const qo = q + ((<usize>((b * T + i) * H + h) * <usize>hd) << 2);
        const row = keepProbs ? probs + ((<usize>((b * H + h) * T + i) * <usize>T) << 2) : scratch;
        const kb = k + ((<usize>(b * T * KV + kvh) * <usize>hd) << 2);
        const kStride = (<usize>(KV * hd)) << 2;
        const mrow = mask + (<usize>(b * T) << 2);
        let j0 = 0;
        let max4 = f32x4.splat(-Infinity);
        if (vec) {
          // keys j0..j0+3 all <= i: no row past the query is read
          for (; j0 + 3 <= i; j0 += 4) {
            const k0 = kb + <usize>j0 * kStride;
            let s4 = f32x4.mul(dot4(qo, k0, k0 + kStride, k0 + 2 * kStride, k0 + 3 * kStride, hd), scale4);
            let vis = i32x4.eq(v128.load(mrow + (<usize>j0 << 2)), i32x4.splat(1));
            if (j0 + 3 == i) vis = i32x4.replace_lane(vis, 3, -1);
            s4 = v128.bitselect(s4, ninf4, vis);
            max4 = f32x4.max(max4, s4);
            v128.store(row + (<usize>j0 << 2), s4);
          }
        }
        let max: f32 = Mathf.max(Mathf.max(f32x4.extract_lane(max4, 0), f32x4.extract_lane(max4, 1)), Mathf.max(f32x4.extract_lane(max4, 2), f32x4.extract_lane(max4, 3)));
        for (let j = j0; j <= i; j++) {
          let s: f32 = -Infinity;
          if (j == i || load<i32>(mask + (<usize>(b * T + j) << 2)) == 1) {
            s = dot(qo, k + ((<usize>((b * T + j) * KV + kvh) * <usize>hd) << 2), hd) * scale;
            if (s > max) max = s;
          }
          store<f32>(row + (<usize>j << 2), s);
        }
        softmaxRow(row, i + 1, max);
        const oo = out + ((<usize>((b * T + i) * H + h) * <usize>hd) << 2);
        memory.fill(oo, 0, <usize>hd << 2);
        const vb = v + ((<usize>(b * T * KV + kvh) * <usize>hd) << 2);
        let j = 0;
        if (vec) {
          for (; j + 3 <= i; j += 4) {
            const v0 = vb + <usize>j * kStride;
            const p4 = v128.load(row + (<usize>j << 2));
            axpy4(oo, p4, f32x4.ne(p4, f32x4.splat(0)), v0, v0 + kStride, v0 + 2 * kStride, v0 + 3 * kStride, hd);
          }
        }
        for (; j <= i; j++) {
          const p = load<f32>(row + (<usize>j << 2));
          if (p != 0) axpy(oo, p, vb + <usize>j * kStride, hd);
        }
        if (keepProbs && i + 1 < T) memory.fill(row + (<usize>(i + 1) << 2), 0, <usize>(T - i - 1) << 2);
      }
    }
  }
}

/**
 * dq, dk, dv of attention given probs and dout, for the units [u0, u1) of (batch row, kv head) pairs (as in
 * `attention`; a unit owns its rows of dq, dk and dv). `scratch` holds T floats.
 */
export function attentionBackward(
  q: usize, k: usize, v: usize, probs: usize, dout: usize, dq: usize, dk: usize, dv: usize, scratch: usize,
  B: i32, T: i32, H: i32, KV: i32, hd: i32, u0: i32, u1: i32,
): void {
  const group = H / KV;
  const scale = <f32>(1.0 / Math.sqrt(<f64>hd));
  const dP = scratch;
  const scale4 = f32x4.splat(scale);
  const vec = (hd & 3) == 0;
  const kvStride = (<usize>(KV * hd)) << 2;
  const headBytes = <usize>hd << 2;
  for (let u = u0; u < u1; u++) {
    const b = u / KV, kvh = u % KV;
    for (let t = 0; t < T; t++) {
      memory.fill(dq + ((<usize>((b * T + t) * H + kvh * group) * <usize>hd) << 2), 0, headBytes * <usize>group);
      memory.fill(dk + ((<usize>((b * T + t) * KV + kvh) * <usize>hd) << 2), 0, headBytes);
      memory.fill(dv + ((<usize>((b * T + t) * KV + kvh) * <usize>hd) << 2), 0, headBytes);
    }
    const vb = v + ((<usize>(b * T * KV + kvh) * <usize>hd) << 2);
    for (let h = kvh * group; h < (kvh + 1) * group; h++) {
      for (let i = 0; i < T; i++) {
        const qOff = (<usize>((b * T + i) * H + h) * <usize>hd) << 2;
        const prow = probs + ((<usize>((b * H + h) * T + i) * <usize>T) << 2);
        let rowDot = 0.0;
        let j0 = 0;
        if (vec) {
          // dP for four keys at once; dv and the f64 row dot key by key, in order
          for (; j0 + 3 <= i; j0 += 4) {
            const v0 = vb + <usize>j0 * kvStride;
            v128.store(dP + (<usize>j0 << 2), dot4(dout + qOff, v0, v0 + kvStride, v0 + 2 * kvStride, v0 + 3 * kvStride, hd));
            for (let j = j0; j < j0 + 4; j++) {
              const p = load<f32>(prow + (<usize>j << 2));
              if (p == 0) {
                store<f32>(dP + (<usize>j << 2), 0);
                continue;
              }
              const s = load<f32>(dP + (<usize>j << 2));
              axpy(dv + (vb - v) + <usize>j * kvStride, p, dout + qOff, hd);
              rowDot += <f64>p * <f64>s;
            }
          }
        }
        for (let j = j0; j <= i; j++) {
          const p = load<f32>(prow + (<usize>j << 2));
          if (p == 0) {
            store<f32>(dP + (<usize>j << 2), 0);
            continue;
          }
          const kvOff = (<usize>((b * T + j) * KV + kvh) * <usize>hd) << 2;
          const s = dot(dout + qOff, v + kvOff, hd);
          axpy(dv + kvOff, p, dout + qOff, hd);
          store<f32>(dP + (<usize>j << 2), s);
          rowDot += <f64>p * <f64>s;
        }
        const rd = <f32>rowDot;
        let j1 = 0;
        if (vec) {
          // dq_i over four keys in a register; dk key by key
          for (; j1 + 3 <= i; j1 += 4) {
            const p4 = v128.load(prow + (<usize>j1 << 2));
            const ds4 = f32x4.mul(f32x4.mul(p4, f32x4.sub(v128.load(dP + (<usize>j1 << 2)), f32x4.splat(rd))), scale4);
            const k0 = k + (vb - v) + <usize>j1 * kvStride;
            axpy4(dq + qOff, ds4, f32x4.ne(p4, f32x4.splat(0)), k0, k0 + kvStride, k0 + 2 * kvStride, k0 + 3 * kvStride, hd);
            for (let j = j1; j < j1 + 4; j++) {
              const p = load<f32>(prow + (<usize>j << 2));
              if (p == 0) continue;
              const ds = p * (load<f32>(dP + (<usize>j << 2)) - rd) * scale;
              axpy(dk + (vb - v) + <usize>j * kvStride, ds, q + qOff, hd);
            }
          }
        }
        for (let j = j1; j <= i; j++) {
          const p = load<f32>(prow + (<usize>j << 2));
          if (p == 0) continue;
          const ds = p * (load<f32>(dP + (<usize>j << 2)) - rd) * scale;
          const kvOff = (<usize>((b * T + j) * KV + kvh) * <usize>hd) << 2;
          axpy(dq + qOff, ds, k + kvOff, hd);
          axpy(dk + kvOff, ds, q + qOff, hd);
        }
      }
    }
  }
}

/**
 * One new query per head against `len` cached positions (all visible). q [H*hd], caches [>= len, KV*hd],
 * out [H*hd]; `scratch` holds len floats. Only the query heads of kv heads [kv0, kv1) (threads split them).
 */
export function attentionDecode(
  q: usize, kCache: usize, vCache: usize, out: usize, scratch: usize, len: i32, H: i32, KV: i32, hd: i32, kv0: i32, kv1: i32,
): void {
  const group = H / KV;
  const scale = <f32>(1.0 / Math.sqrt(<f64>hd));
  const scale4 = f32x4.splat(scale);
  const vec = (hd & 3) == 0;
  const kvStride = (<usize>(KV * hd)) << 2;
  for (let h = kv0 * group; h < kv1 * group; h++) {
    const kvh = h / group;
    const qo = q + ((<usize>h * <usize>hd) << 2);
    const kb = kCache + ((<usize>kvh * <usize>hd) << 2);
    let j0 = 0;
    let max4 = f32x4.splat(-Infinity);
    if (vec) {
      for (; j0 + 4 <= len; j0 += 4) {
        const k0 = kb + <usize>j0 * kvStride;
        const s4 = f32x4.mul(dot4(qo, k0, k0 + kvStride, k0 + 2 * kvStride, k0 + 3 * kvStride, hd), scale4);
        v128.store(scratch + (<usize>j0 << 2), s4);
        max4 = f32x4.max(max4, s4);
      }
    }
    let max: f32 = Mathf.max(Mathf.max(f32x4.extract_lane(max4, 0), f32x4.extract_lane(max4, 1)), Mathf.max(f32x4.extract_lane(max4, 2), f32x4.extract_lane(max4, 3)));
    for (let j = j0; j < len; j++) {
      const s = dot(qo, kCache + ((<usize>(j * KV + kvh) * <usize>hd) << 2), hd) * scale;
      store<f32>(scratch + (<usize>j << 2), s);
      if (s > max) max = s;
    }
    softmaxRow(scratch, len, max);
    const oo = out + ((<usize>h * <usize>hd) << 2);
    memory.fill(oo, 0, <usize>hd << 2);
    const vb = vCache + ((<usize>kvh * <usize>hd) << 2);
    let j = 0;
    if (vec) {
      for (; j + 4 <= len; j += 4) {
        const v0 = vb + <usize>j * kvStride;
        const p4 = v128.load(scratch + (<usize>j << 2));
        axpy4(oo, p4, f32x4.ne(p4, f32x4.splat(0)), v0, v0 + kvStride, v0 + 2 * kvStride, v0 + 3 * kvStride, hd);
      }
    }
    for (; j < len; j++) {
      const p = load<f32>(scratch + (<usize>j << 2));
      if (p != 0) axpy(oo, p, vCache + ((<usize>(j * KV + kvh) * <usize>hd) << 2), hd);
    }
  }
}
