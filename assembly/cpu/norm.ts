// RMSNorm forward/backward. Accumulation rule: the row sums (sum x^2, sum dy w x) and the dw column sums
// are f64 (f32 lanes promoted), the per-element arithmetic is f64 rounded once to f32 — the reference's own
// rule, so outputs agree with it to ~1 ulp (only the summation order differs).
import { sumF64 } from "./simd";

/** y = x * rstd * w, rstd[r] = 1/sqrt(mean(x_r^2) + eps) (stored f32). */
export function rmsnorm(x: usize, w: usize, y: usize, rstd: usize, rows: i32, dim: i32, eps: f64): void {
  const d4 = dim & ~3;
  for (let r = 0; r < rows; r++) {
    const xr = x + ((<usize>r * <usize>dim) << 2), yr = y + ((<usize>r * <usize>dim) << 2);
    let acc = f64x2.splat(0);
    for (let j = 0; j < d4; j += 4) {
      const v = v128.load(xr + (<usize>j << 2));
      const lo = f64x2.promote_low_f32x4(v), hi = f64x2.promote_low_f32x4(v128.shuffle<i32>(v, v, 2, 3, 0, 1));
      acc = f64x2.add(acc, f64x2.add(f64x2.mul(lo, lo), f64x2.mul(hi, hi)));
    }
    let ss = sumF64(acc);
    for (let j = d4; j < dim; j++) {
      const v = <f64>load<f32>(xr + (<usize>j << 2));
      ss += v * v;
    }
    const rs = 1.0 / Math.sqrt(ss / <f64>dim + eps);
    store<f32>(rstd + (<usize>r << 2), <f32>rs);
    for (let j = 0; j < dim; j++) {
      const o = <usize>j << 2;
      store<f32>(yr + o, <f32>(<f64>load<f32>(xr + o) * rs * <f64>load<f32>(w + o)));
    }
  }
}

/**
 * dx_j = rstd w_j dy_j - rstd^3/dim x_j sum_k dy_k w_k x_k, for rows [r0, r1). The dw column sums
 * (dy_j x_j rstd) go to f64 accumulators, one [dim] block per chunk of `chunk` rows
 * (dwAcc + (r / chunk) * dim, not cleared): the caller sums the blocks in chunk order, so the result is the
 * same whichever thread ran which chunks.
 */
export function rmsnormBackward(x: usize, w: usize, rstd: usize, dy: usize, dx: usize, dwAcc: usize, r0: i32, r1: i32, dim: i32, chunk: i32): void {
  for (let r = r0; r < r1; r++) {
    const base = (<usize>r * <usize>dim) << 2;
    const xr = x + base, dyr = dy + base, dxr = dx + base;
    const acc = dwAcc + ((<usize>(r / chunk) * <usize>dim) << 3);
    const rs = <f64>load<f32>(rstd + (<usize>r << 2));
    let dot = 0.0;
    for (let j = 0; j < dim; j++) {
      const o = <usize>j << 2;
      const xv = <f64>load<f32>(xr + o), g = <f64>load<f32>(dyr + o);
      dot += g * <f64>load<f32>(w + o) * xv;
      const a = acc + (<usize>j << 3);
      store<f64>(a, load<f64>(a) + g * xv * rs);
    }
    const c = (rs * rs * rs * dot) / <f64>dim;
    for (let j = 0; j < dim; j++) {
      const o = <usize>j << 2;
      store<f32>(dxr + o, <f32>(rs * <f64>load<f32>(w + o) * <f64>load<f32>(dyr + o) - c * <f64>load<f32>(xr + o)));
    }
  }
}
