// Causal grouped-query attention over q [B,T,H*hd], k/v [B,T,KV*hd], mask i32 [B,T] (the reference's layout
// and visibility: key j is visible to query i iff j == i or (j < i and mask[j] == 1)), its backward, and
// single-query decode against a KV cache. Accumulation rule: dot products in f32x4 lanes (+ fixed-order lane
// sum), exp in f32 (exp4), the softmax denominator and the backward's row dot in f64, every vector
// accumulation (out, dq, dk, dv) in f32.
import { exp4, hsum, madd } from "./simd";

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
  for (let u = u0; u < u1; u++) {
    const b = u / KV, kvh = u % KV;
    for (let h = kvh * group; h < (kvh + 1) * group; h++) {
      for (let i = 0; i < T; i++) {
        const qo = q + ((<usize>((b * T + i) * H + h) * <usize>hd) << 2);
        const row = keepProbs ? probs + ((<usize>((b * H + h) * T + i) * <usize>T) << 2) : scratch;
        let max: f32 = -Infinity;
        for (let j = 0; j <= i; j++) {
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
        for (let j = 0; j <= i; j++) {
          const p = load<f32>(row + (<usize>j << 2));
          if (p != 0) axpy(oo, p, v + ((<usize>((b * T + j) * KV + kvh) * <usize>hd) << 2), hd);
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
  const headBytes = <usize>hd << 2;
  for (let u = u0; u < u1; u++) {
    const b = u / KV, kvh = u % KV;
    for (let t = 0; t < T; t++) {
      memory.fill(dq + ((<usize>((b * T + t) * H + kvh * group) * <usize>hd) << 2), 0, headBytes * <usize>group);
      memory.fill(dk + ((<usize>((b * T + t) * KV + kvh) * <usize>hd) << 2), 0, headBytes);
      memory.fill(dv + ((<usize>((b * T + t) * KV + kvh) * <usize>hd) << 2), 0, headBytes);
    }
    for (let h = kvh * group; h < (kvh + 1) * group; h++) {
      for (let i = 0; i < T; i++) {
        const qOff = (<usize>((b * T + i) * H + h) * <usize>hd) << 2;
        const prow = probs + ((<usize>((b * H + h) * T + i) * <usize>T) << 2);
        let rowDot = 0.0;
        for (let j = 0; j <= i; j++) {
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
        for (let j = 0; j <= i; j++) {
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
  for (let h = kv0 * group; h < kv1 * group; h++) {
    const kvh = h / group;
    const qo = q + ((<usize>h * <usize>hd) << 2);
    let max: f32 = -Infinity;
    for (let j = 0; j < len; j++) {
      const s = dot(qo, kCache + ((<usize>(j * KV + kvh) * <usize>hd) << 2), hd) * scale;
      store<f32>(scratch + (<usize>j << 2), s);
      if (s > max) max = s;
    }
    softmaxRow(scratch, len, max);
    const oo = out + ((<usize>h * <usize>hd) << 2);
    memory.fill(oo, 0, <usize>hd << 2);
    for (let j = 0; j < len; j++) {
      const p = load<f32>(scratch + (<usize>j << 2));
      if (p != 0) axpy(oo, p, vCache + ((<usize>(j * KV + kvh) * <usize>hd) << 2), hd);
    }
  }
}
