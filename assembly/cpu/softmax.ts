// Log-softmax + gather + entropy over rows of logits [rows, vocab], and its backward. Accumulation rule:
// exp is f32 (exp4, ~2 ulp), the two row sums (sum e, sum e z) are f64 from promoted lanes, lse and entropy
// are formed in f64 and rounded once. Nothing vocab-sized is stored by the forward.
import { addF64, exp4, sumF64 } from "./simd";

/** logprob[r] = z[r, target[r]] - lse[r]; entropy[r] = lse[r] - sum softmax(z) z; lse[r] = logsumexp(z_r). */
export function logSoftmaxGatherEntropy(z: usize, targets: usize, logprob: usize, entropy: usize, lse: usize, rows: i32, vocab: i32): void {
  const v4 = vocab & ~3;
  for (let r = 0; r < rows; r++) {
    const zr = z + ((<usize>r * <usize>vocab) << 2);
    let mx = f32x4.splat(-Infinity);
    for (let j = 0; j < v4; j += 4) mx = f32x4.max(mx, v128.load(zr + (<usize>j << 2)));
    let zmax = max(max(f32x4.extract_lane(mx, 0), f32x4.extract_lane(mx, 1)), max(f32x4.extract_lane(mx, 2), f32x4.extract_lane(mx, 3)));
    for (let j = v4; j < vocab; j++) zmax = max(zmax, load<f32>(zr + (<usize>j << 2)));
    const m4 = f32x4.splat(zmax);
    let s = f64x2.splat(0), sz = f64x2.splat(0);
    for (let j = 0; j < v4; j += 4) {
      const zv = v128.load(zr + (<usize>j << 2));
      const e = exp4(f32x4.sub(zv, m4));
      s = addF64(s, e);
      // e z in f64: promote both then multiply
      const elo = f64x2.promote_low_f32x4(e), ehi = f64x2.promote_low_f32x4(v128.shuffle<i32>(e, e, 2, 3, 0, 1));
      const zlo = f64x2.promote_low_f32x4(zv), zhi = f64x2.promote_low_f32x4(v128.shuffle<i32>(zv, zv, 2, 3, 0, 1));
      sz = f64x2.add(sz, f64x2.add(f64x2.mul(elo, zlo), f64x2.mul(ehi, zhi)));
    }
    let sum = sumF64(s), sumEz = sumF64(sz);
    for (let j = v4; j < vocab; j++) {
      const zj = load<f32>(zr + (<usize>j << 2));
      const e = <f64>f32x4.extract_lane(exp4(f32x4.splat(zj - zmax)), 0);
      sum += e;
      sumEz += e * <f64>zj;
    }
    const l = <f64>zmax + Math.log(sum);
    const t = load<i32>(targets + (<usize>r << 2));
    store<f32>(lse + (<usize>r << 2), <f32>l);
    store<f32>(logprob + (<usize>r << 2), <f32>(<f64>load<f32>(zr + (<usize>t << 2)) - l));
    store<f32>(entropy + (<usize>r << 2), <f32>(l - sumEz / sum));
  }
}

/** dz = dlogprob (1[k == target] - p) - dentropy p (log p + H), p = exp(z - lse); rows with both 0 get 0. */
export function logSoftmaxGatherEntropyBackward(
  z: usize, targets: usize, lse: usize, entropy: usize, dlogprob: usize, dentropy: usize, dz: usize, rows: i32, vocab: i32,
): void {
  const v4 = vocab & ~3;
  for (let r = 0; r < rows; r++) {
    const base = (<usize>r * <usize>vocab) << 2;
    const zr = z + base, dr = dz + base;
    const gl = load<f32>(dlogprob + (<usize>r << 2)), ge = load<f32>(dentropy + (<usize>r << 2));
    if (gl == 0 && ge == 0) {
      memory.fill(dr, 0, <usize>vocab << 2);
      continue;
    }
    const l4 = f32x4.splat(load<f32>(lse + (<usize>r << 2)));
    const h4 = f32x4.splat(load<f32>(entropy + (<usize>r << 2)));
    const ngl = f32x4.splat(-gl), nge = f32x4.splat(-ge);
    let j = 0;
    for (; j < v4; j += 4) {
      const o = <usize>j << 2;
      const logp = f32x4.sub(v128.load(zr + o), l4);
      const p = exp4(logp);
      v128.store(dr + o, f32x4.add(f32x4.mul(ngl, p), f32x4.mul(f32x4.mul(nge, p), f32x4.add(logp, h4))));
    }
    for (; j < vocab; j++) {
      const o = <usize>j << 2;
      const logp = f32x4.sub(f32x4.splat(load<f32>(zr + o)), l4);
      const p = exp4(logp);
      store<f32>(dr + o, f32x4.extract_lane(f32x4.add(f32x4.mul(ngl, p), f32x4.mul(f32x4.mul(nge, p), f32x4.add(logp, h4))), 0));
    }
    const t = dr + (<usize>load<i32>(targets + (<usize>r << 2)) << 2);
    store<f32>(t, load<f32>(t) + gl);
  }
}
