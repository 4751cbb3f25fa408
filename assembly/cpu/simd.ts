// Shared f32x4 helpers. Only plain IEEE SIMD ops (no relaxed-simd FMA), so every runtime and CPU gives the
// same bits.

@inline export function madd(acc: v128, a: v128, b: v128): v128 {
  return f32x4.add(acc, f32x4.mul(a, b));
}

/** Lane sum in a fixed order: (l0 + l1) + (l2 + l3). */
@inline export function hsum(v: v128): f32 {
  return (f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 1)) + (f32x4.extract_lane(v, 2) + f32x4.extract_lane(v, 3));
}

/** Adds the four lanes of v, promoted to f64, into an f64x2 accumulator. */
@inline export function addF64(acc: v128, v: v128): v128 {
  return f64x2.add(acc, f64x2.add(f64x2.promote_low_f32x4(v), f64x2.promote_low_f32x4(v128.shuffle<i32>(v, v, 2, 3, 0, 1))));
}

@inline export function sumF64(acc: v128): f64 {
  return f64x2.extract_lane(acc, 0) + f64x2.extract_lane(acc, 1);
}

/**
 * e^x on four f32 lanes (Cephes expf): x = n ln2 + r with a two-part ln2, a degree-6 polynomial for e^r,
 * 2^n built in the exponent bits. Relative error about 2 ulp of f32; inputs below -87.3 (and -inf) give 0,
 * inputs above 88 are clamped to e^88.
 */
@inline export function exp4(x: v128): v128 {
  const tiny = f32x4.lt(x, f32x4.splat(-87.33654));
  const xc = f32x4.min(f32x4.max(x, f32x4.splat(-87.33654)), f32x4.splat(88.0));
  const n = f32x4.nearest(f32x4.mul(xc, f32x4.splat(1.44269504)));
  let r = f32x4.sub(xc, f32x4.mul(n, f32x4.splat(0.693359375)));
  r = f32x4.sub(r, f32x4.mul(n, f32x4.splat(-2.12194440e-4)));
  let p = f32x4.splat(1.9875691500e-4);
  p = madd(f32x4.splat(1.3981999507e-3), p, r);
  p = madd(f32x4.splat(8.3334519073e-3), p, r);
  p = madd(f32x4.splat(4.1665795894e-2), p, r);
  p = madd(f32x4.splat(1.6666665459e-1), p, r);
  p = madd(f32x4.splat(5.0000001201e-1), p, r);
  const y = f32x4.add(madd(r, p, f32x4.mul(r, r)), f32x4.splat(1.0));
  const pow2 = i32x4.shl(i32x4.add(i32x4.trunc_sat_f32x4_s(n), i32x4.splat(127)), 23);
  return v128.andnot(f32x4.mul(y, pow2), tiny);
}

/** Scalar e^x with exactly the arithmetic of one exp4 lane. */
@inline export function exp1(x: f32): f32 {
  return f32x4.extract_lane(exp4(f32x4.splat(x)), 0);
}
