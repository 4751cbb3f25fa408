// f32 GEMM for the three forms the model needs, C[m,n] = op(A) op(B):
//   FORM_AB   A [m,k], B [k,n]    (forward projections)
//   FORM_ABT  A [m,k], B [n,k]    (dx = dy W^T, tied lm head)
//   FORM_ATB  A [k,m], B [k,n]    (dW = x^T dy)
// Goto-style: B is packed per (KC x NC) block into 8-column panels, A per (MC x KC) block into 4-row
// panels (zero-padded, so every size runs the same micro-kernel), and a 4x8 register tile of f32x4
// accumulators runs over KC. Accumulation rule: each C element is a sum over k in f32, sequential in p
// inside a KC block, the block sum added to C once per block. The partition of columns [j0, j1) does not
// change any element's arithmetic, so splitting columns over threads gives bit-identical results.

export const FORM_AB: i32 = 0;
export const FORM_ABT: i32 = 1;
export const FORM_ATB: i32 = 2;

const MR = 4;
const NR = 8;
const KC = 256;
const MC = 128;
const NC = 512;

/** Bytes of scratch one gemm call needs (packed A block, packed B block, one edge tile). */
export function gemmScratchBytes(): i32 {
  return (MC * KC + KC * NC + MR * NR) * 4;
}

/** Packs A[i0:i0+mc, p0:p0+kc] into MR-row panels: ap[(panel*kc + p)*MR + r]; rows past m are 0. */
function packA(a: usize, atrans: bool, m: i32, k: i32, i0: i32, mc: i32, p0: i32, kc: i32, ap: usize): void {
  for (let ip = 0; ip < mc; ip += MR) {
    const dst = ap + (<usize>(ip * kc) << 2);
    const rows = min(MR, m - i0 - ip);
    if (atrans && rows == MR) {
      // A [k,m]: the MR values of one p are contiguous
      let src = a + ((<usize>p0 * <usize>m + <usize>(i0 + ip)) << 2);
      for (let p = 0; p < kc; p++) {
        v128.store(dst + (<usize>p << 4), v128.load(src));
        src += <usize>m << 2;
      }
    } else {
      for (let p = 0; p < kc; p++) {
        const d = dst + (<usize>p << 4);
        for (let r = 0; r < MR; r++) {
          let v: f32 = 0;
          if (r < rows) {
            const i = i0 + ip + r, q = p0 + p;
            v = atrans ? load<f32>(a + ((<usize>q * <usize>m + <usize>i) << 2)) : load<f32>(a + ((<usize>i * <usize>k + <usize>q) << 2));
          }
          store<f32>(d + (<usize>r << 2), v);
        }
      }
    }
  }
}

/** Packs B[p0:p0+kc, j0:j0+nc] into NR-column panels: bp[(panel*kc + p)*NR + c]; columns past jEnd are 0. */
function packB(b: usize, btrans: bool, k: i32, n: i32, jEnd: i32, p0: i32, kc: i32, j0: i32, nc: i32, bp: usize): void {
  for (let jp = 0; jp < nc; jp += NR) {
    const dst = bp + (<usize>(jp * kc) << 2);
    const cols = min(NR, jEnd - j0 - jp);
    if (!btrans && cols == NR) {
      let src = b + ((<usize>p0 * <usize>n + <usize>(j0 + jp)) << 2);
      for (let p = 0; p < kc; p++) {
        const d = dst + (<usize>p << 5);
        v128.store(d, v128.load(src));
        v128.store(d, v128.load(src, 16), 16);
        src += <usize>n << 2;
      }
    } else if (btrans && cols == NR) {
      // B [n,k]: each of the NR columns is a contiguous row of B
      for (let c = 0; c < NR; c++) {
        let src = b + ((<usize>(j0 + jp + c) * <usize>k + <usize>p0) << 2);
        let d = dst + (<usize>c << 2);
        for (let p = 0; p < kc; p++) {
          store<f32>(d, load<f32>(src));
          src += 4;
          d += NR << 2;
        }
      }
    } else {
      for (let p = 0; p < kc; p++) {
        const d = dst + (<usize>p << 5);
        for (let c = 0; c < NR; c++) {
          let v: f32 = 0;
          if (c < cols) {
            const j = j0 + jp + c, q = p0 + p;
            v = btrans ? load<f32>(b + ((<usize>j * <usize>k + <usize>q) << 2)) : load<f32>(b + ((<usize>q * <usize>n + <usize>j) << 2));
          }
          store<f32>(d + (<usize>c << 2), v);
        }
      }
    }
  }
}

@inline function fma4(acc: v128, a: v128, b: v128): v128 {
  return f32x4.add(acc, f32x4.mul(a, b));
}

@inline function put(dst: usize, v: v128, first: bool): void {
  v128.store(dst, first ? v : f32x4.add(v128.load(dst), v));
}

/** C tile (rows x cols of a 4x8 tile at c, row stride ldc elements) = / += packed A panel x packed B panel. */
function micro(ap: usize, bp: usize, kc: i32, c: usize, ldc: i32, rows: i32, cols: i32, first: bool, tmp: usize): void {
  let c00 = f32x4.splat(0), c01 = f32x4.splat(0);
  let c10 = f32x4.splat(0), c11 = f32x4.splat(0);
  let c20 = f32x4.splat(0), c21 = f32x4.splat(0);
  let c30 = f32x4.splat(0), c31 = f32x4.splat(0);
  for (let p = 0; p < kc; p++) {
    const b0 = v128.load(bp), b1 = v128.load(bp, 16);
    let a = v128.load32_splat(ap);
    c00 = fma4(c00, a, b0);
    c01 = fma4(c01, a, b1);
    a = v128.load32_splat(ap, 4);
    c10 = fma4(c10, a, b0);
    c11 = fma4(c11, a, b1);
    a = v128.load32_splat(ap, 8);
    c20 = fma4(c20, a, b0);
    c21 = fma4(c21, a, b1);
    a = v128.load32_splat(ap, 12);
    c30 = fma4(c30, a, b0);
    c31 = fma4(c31, a, b1);
    ap += 16;
    bp += 32;
  }
  const ld = <usize>ldc << 2;
  if (rows == MR && cols == NR) {
    put(c, c00, first);
    put(c + 16, c01, first);
    put(c + ld, c10, first);
    put(c + ld + 16, c11, first);
    put(c + 2 * ld, c20, first);
    put(c + 2 * ld + 16, c21, first);
    put(c + 3 * ld, c30, first);
    put(c + 3 * ld + 16, c31, first);
    return;
  }
  // edge tile: spill to tmp, write only the valid part
  v128.store(tmp, c00);
  v128.store(tmp, c01, 16);
  v128.store(tmp, c10, 32);
  v128.store(tmp, c11, 48);
  v128.store(tmp, c20, 64);
  v128.store(tmp, c21, 80);
  v128.store(tmp, c30, 96);
  v128.store(tmp, c31, 112);
  for (let r = 0; r < rows; r++) {
    for (let q = 0; q < cols; q++) {
      const d = c + <usize>r * ld + (<usize>q << 2);
      const v = load<f32>(tmp + (<usize>(r * NR + q) << 2));
      store<f32>(d, first ? v : load<f32>(d) + v);
    }
  }
}

/** Rows of C for which the unpacked small-m paths are used (decode: m = 1). */
const SMALL_M = 4;

/**
 * C[:, j0:j1] of the product selected by `form` (FORM_*), C row-major [m,n]. `scratch` holds
 * gemmScratchBytes() bytes, 16-aligned. Every size is handled; j0/j1 let threads split the columns.
 */
export function gemm(form: i32, a: usize, b: usize, c: usize, m: i32, k: i32, n: i32, j0: i32, j1: i32, scratch: usize): void {
  if (m <= 0 || j1 <= j0) return;
  if (k == 0) {
    for (let i = 0; i < m; i++) memory.fill(c + ((<usize>i * <usize>n + <usize>j0) << 2), 0, <usize>(j1 - j0) << 2);
    return;
  }
  if (m < SMALL_M && form == FORM_AB) return gemvAB(a, k, 1, b, c, m, k, n, j0, j1);
  if (m < SMALL_M && form == FORM_ATB) return gemvAB(a, 1, m, b, c, m, k, n, j0, j1);
  if (m < SMALL_M && form == FORM_ABT) return gemvABt(a, b, c, m, k, n, j0, j1);
  const atrans = form == FORM_ATB, btrans = form == FORM_ABT;
  const ap = scratch, bp = scratch + ((MC * KC) << 2), tmp = bp + ((KC * NC) << 2);
  for (let jc = j0; jc < j1; jc += NC) {
    const nc = min(NC, j1 - jc);
    for (let pc = 0; pc < k; pc += KC) {
      const kc = min(KC, k - pc);
      packB(b, btrans, k, n, j1, pc, kc, jc, nc, bp);
      for (let ic = 0; ic < m; ic += MC) {
        const mc = min(MC, m - ic);
        packA(a, atrans, m, k, ic, mc, pc, kc, ap);
        for (let jr = 0; jr < nc; jr += NR) {
          const cols = min(NR, nc - jr);
          const bpp = bp + (<usize>(jr * kc) << 2);
          for (let ir = 0; ir < mc; ir += MR) {
            const rows = min(MR, mc - ir);
            const cp = c + ((<usize>(ic + ir) * <usize>n + <usize>(jc + jr)) << 2);
            micro(ap + (<usize>(ir * kc) << 2), bpp, kc, cp, n, rows, cols, pc == 0, tmp);
          }
        }
      }
    }
  }
}

/**
 * Small m, op(A) x B [k,n] with op(A)[i,p] = a[i*ars + p*acs] (A [m,k]: ars = k, acs = 1; A^T of [k,m]:
 * ars = 1, acs = m), without packing: the C row (in L1) gathers four rows of B per sweep, B is read as four
 * sequential streams. Each element still sums its products sequentially in p, in f32.
 */
function gemvAB(a: usize, ars: i32, acs: i32, b: usize, c: usize, m: i32, k: i32, n: i32, j0: i32, j1: i32): void {
  const ldb = <usize>n << 2;
  const astep = <usize>acs << 2;
  const w = j1 - j0, w4 = w & ~3;
  for (let i = 0; i < m; i++) {
    const arow = a + ((<usize>i * <usize>ars) << 2);
    const crow = c + ((<usize>i * <usize>n + <usize>j0) << 2);
    memory.fill(crow, 0, <usize>w << 2);
    let p = 0;
    for (; p + 4 <= k; p += 4) {
      const ap = arow + <usize>p * astep;
      const s0 = load<f32>(ap), s1 = load<f32>(ap + astep), s2 = load<f32>(ap + 2 * astep), s3 = load<f32>(ap + 3 * astep);
      const v0 = f32x4.splat(s0), v1 = f32x4.splat(s1), v2 = f32x4.splat(s2), v3 = f32x4.splat(s3);
      const b0 = b + <usize>p * ldb + (<usize>j0 << 2), b1 = b0 + ldb, b2 = b1 + ldb, b3 = b2 + ldb;
      let j = 0;
      for (; j < w4; j += 4) {
        const o = <usize>j << 2;
        let acc = v128.load(crow + o);
        acc = fma4(acc, v0, v128.load(b0 + o));
        acc = fma4(acc, v1, v128.load(b1 + o));
        acc = fma4(acc, v2, v128.load(b2 + o));
        acc = fma4(acc, v3, v128.load(b3 + o));
        v128.store(crow + o, acc);
      }
      for (; j < w; j++) {
        const o = <usize>j << 2;
        let acc = load<f32>(crow + o);
        acc += s0 * load<f32>(b0 + o);
        acc += s1 * load<f32>(b1 + o);
        acc += s2 * load<f32>(b2 + o);
        acc += s3 * load<f32>(b3 + o);
        store<f32>(crow + o, acc);
      }
    }
    for (; p < k; p++) {
      const s0 = load<f32>(arow + <usize>p * astep);
      const v0 = f32x4.splat(s0);
      const b0 = b + <usize>p * ldb + (<usize>j0 << 2);
      let j = 0;
      for (; j < w4; j += 4) {
        const o = <usize>j << 2;
        v128.store(crow + o, fma4(v128.load(crow + o), v0, v128.load(b0 + o)));
      }
      for (; j < w; j++) {
        const o = <usize>j << 2;
        store<f32>(crow + o, load<f32>(crow + o) + s0 * load<f32>(b0 + o));
      }
    }
  }
}

@inline function hsum(v: v128): f32 {
  // fixed order ((l0 + l1) + (l2 + l3))
  return (f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 1)) + (f32x4.extract_lane(v, 2) + f32x4.extract_lane(v, 3));
}

/** Small m, A [m,k] x B[n,k]^T: four rows of B per pass, dot products in f32x4 lanes. */
function gemvABt(a: usize, b: usize, c: usize, m: i32, k: i32, n: i32, j0: i32, j1: i32): void {
  const k4 = k & ~3;
  const ldb = <usize>k << 2;
  for (let i = 0; i < m; i++) {
    const arow = a + ((<usize>i * <usize>k) << 2);
    const crow = c + ((<usize>i * <usize>n) << 2);
    let j = j0;
    for (; j + 4 <= j1; j += 4) {
      const b0 = b + <usize>j * ldb, b1 = b0 + ldb, b2 = b1 + ldb, b3 = b2 + ldb;
      let s0 = f32x4.splat(0), s1 = f32x4.splat(0), s2 = f32x4.splat(0), s3 = f32x4.splat(0);
      for (let p = 0; p < k4; p += 4) {
        const o = <usize>p << 2;
        const av = v128.load(arow + o);
        s0 = fma4(s0, av, v128.load(b0 + o));
        s1 = fma4(s1, av, v128.load(b1 + o));
        s2 = fma4(s2, av, v128.load(b2 + o));
        s3 = fma4(s3, av, v128.load(b3 + o));
      }
      let r0 = hsum(s0), r1 = hsum(s1), r2 = hsum(s2), r3 = hsum(s3);
      for (let p = k4; p < k; p++) {
        const o = <usize>p << 2;
        const av = load<f32>(arow + o);
        r0 += av * load<f32>(b0 + o);
        r1 += av * load<f32>(b1 + o);
        r2 += av * load<f32>(b2 + o);
        r3 += av * load<f32>(b3 + o);
      }
      const d = crow + (<usize>j << 2);
      store<f32>(d, r0);
      store<f32>(d, r1, 4);
      store<f32>(d, r2, 8);
      store<f32>(d, r3, 12);
    }
    for (; j < j1; j++) {
      const bj = b + <usize>j * ldb;
      let s0 = f32x4.splat(0);
      for (let p = 0; p < k4; p += 4) s0 = fma4(s0, v128.load(arow + (<usize>p << 2)), v128.load(bj + (<usize>p << 2)));
      let r = hsum(s0);
      for (let p = k4; p < k; p++) r += load<f32>(arow + (<usize>p << 2)) * load<f32>(bj + (<usize>p << 2));
      store<f32>(crow + (<usize>j << 2), r);
    }
  }
}
