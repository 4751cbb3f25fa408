// Elementwise kernels: RoPE, SwiGLU, AdamW.
import { exp4, madd } from "./simd";

/**
 * RoPE over x [rows, heads*hd] (y may alias x). `invFreq` [hd/2] f64, positions i32 [rows], sign +1 forward,
 * -1 backward (the inverse rotation). Pairs: (i, i + hd/2) ("rotate_half", the reference's convention) or,
 * with `interleaved`, (2i, 2i+1) (GPT-J / Meta-checkpoint layout). cos/sin and the rotation are f64,
 * rounded once to f32 (the reference's rule).
 */
export function rope(x: usize, y: usize, positions: usize, invFreq: usize, rows: i32, heads: i32, hd: i32, sign: f64, interleaved: bool): void {
  const half = hd >> 1;
  for (let r = 0; r < rows; r++) {
    const pos = <f64>load<i32>(positions + (<usize>r << 2));
    for (let i = 0; i < half; i++) {
      const angle = pos * load<f64>(invFreq + (<usize>i << 3));
      const c = Math.cos(angle), s = sign * Math.sin(angle);
      const ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
      for (let h = 0; h < heads; h++) {
        const o = <usize>(r * heads + h) * <usize>hd;
        const pa = (o + <usize>ia) << 2, pb = (o + <usize>ib) << 2;
        const a = <f64>load<f32>(x + pa), b = <f64>load<f32>(x + pb);
        store<f32>(y + pa, <f32>(a * c - b * s));
        store<f32>(y + pb, <f32>(b * c + a * s));
      }
    }
  }
}

@inline function sigmoid4(g: v128): v128 {
  return f32x4.div(f32x4.splat(1), f32x4.add(f32x4.splat(1), exp4(f32x4.neg(g))));
}

/** y = silu(gate) * up over n elements, f32 (exp4). */
export function swiglu(gate: usize, up: usize, y: usize, n: i32): void {
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const o = <usize>i << 2;
    const g = v128.load(gate + o);
    v128.store(y + o, f32x4.mul(f32x4.mul(g, sigmoid4(g)), v128.load(up + o)));
  }
  for (; i < n; i++) {
    // the tail through the same lane arithmetic (splat), so results do not depend on alignment of n
    const o = <usize>i << 2;
    const g = f32x4.splat(load<f32>(gate + o));
    store<f32>(y + o, f32x4.extract_lane(f32x4.mul(f32x4.mul(g, sigmoid4(g)), f32x4.splat(load<f32>(up + o))), 0));
  }
}

/** dgate, dup of swiglu given dy, f32. */
export function swigluBackward(gate: usize, up: usize, dy: usize, dgate: usize, dup: usize, n: i32): void {
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const o = <usize>i << 2;
    const g = v128.load(gate + o), u = v128.load(up + o), d = v128.load(dy + o);
    const s = sigmoid4(g);
    const one = f32x4.splat(1);
    v128.store(dgate + o, f32x4.mul(f32x4.mul(f32x4.mul(d, u), s), madd(one, g, f32x4.sub(one, s))));
    v128.store(dup + o, f32x4.mul(d, f32x4.mul(g, s)));
  }
  for (; i < n; i++) {
    const o = <usize>i << 2;
    const g = f32x4.splat(load<f32>(gate + o)), u = f32x4.splat(load<f32>(up + o)), d = f32x4.splat(load<f32>(dy + o));
    const s = sigmoid4(g);
    const one = f32x4.splat(1);
    store<f32>(dgate + o, f32x4.extract_lane(f32x4.mul(f32x4.mul(f32x4.mul(d, u), s), madd(one, g, f32x4.sub(one, s))), 0));
    store<f32>(dup + o, f32x4.extract_lane(f32x4.mul(d, f32x4.mul(g, s)), 0));
  }
}

/**
 * One AdamW step in place over n elements with the reference's exact arithmetic (f64, m and v rounded to f32
 * when stored and re-read), so the result is bit-identical to src/model/reference/optim.ts.
 */
export function adamw(params: usize, grads: usize, m: usize, v: usize, n: i32, b1: f64, omb1: f64, b2: f64, omb2: f64, eps: f64, stepSize: f64, bc2Sqrt: f64, decay: f64): void {
  for (let i = 0; i < n; i++) {
    const o = <usize>i << 2;
    const g = <f64>load<f32>(grads + o);
    const mi = <f64><f32>(b1 * <f64>load<f32>(m + o) + omb1 * g);
    const vi = <f64><f32>(b2 * <f64>load<f32>(v + o) + omb2 * g * g);
    store<f32>(m + o, <f32>mi);
    store<f32>(v + o, <f32>vi);
    store<f32>(params + o, <f32>(<f64>load<f32>(params + o) * decay - (stepSize * mi) / (Math.sqrt(vi) / bc2Sqrt + eps)));
  }
}
