import { groupsFor, memoKernel, type GpuContext, type GpuTuning, type KernelSource } from "../context.ts";

/** C[M,N] (=|+=) op(A) @ op(B); op(A) is [M,K] stored [M,K] or, transposed, [K,M]; op(B) is [K,N] stored [K,N] or [N,K].
 * Covers y = x @ W, dX = dY @ W^T (transB) and dW += X^T @ dY (transA, accumulate). */
export interface MatmulShape {
  M: number;
  N: number;
  K: number;
  transA?: boolean;
  transB?: boolean;
  /** Add into C instead of overwriting it (gradient accumulation, residual adds). */
  accumulate?: boolean;
}

const LAYOUT = { M: "u32", N: "u32", K: "u32", accumulate: "u32" } as const;

export function matmulKernel(t: GpuTuning, transA: boolean, transB: boolean): KernelSource {
  const key = `matmul_${transA ? "t" : "n"}${transB ? "t" : "n"}`;
  return memoKernel(t, key, LAYOUT, () => {
  const S = t.matmulSide;
  const R = t.matmulMicro;
  const D = t.matmulDepth;
  // Tiles are stored k-major ([D][TILE]) so the inner loop reads consecutive rows/columns.
  // Loads map consecutive threads to consecutive addresses of the source layout (coalesced).
  const loadA = transA
    ? `let r = e % TILE; let k = e / TILE;` // A stored [K,M]: consecutive e -> consecutive m
    : `let k = e % D; let r = e / D;`; // A stored [M,K]: consecutive e -> consecutive k
  const loadB = transB ? `let k = e % D; let c = e / D;` : `let c = e % TILE; let k = e / TILE;`;
  return `
const S = ${S}u; const R = ${R}u; const D = ${D}u; const TILE = ${S * R}u;
@group(0) @binding(1) var<storage, read> A: array<f32>;
@group(0) @binding(2) var<storage, read> B: array<f32>;
@group(0) @binding(3) var<storage, read_write> C: array<f32>;
var<workgroup> As: array<f32, ${S * R * D}>;
var<workgroup> Bs: array<f32, ${S * R * D}>;
fn readA(r: u32, k: u32) -> f32 {
  if (r >= P.M || k >= P.K) { return 0.0; }
  return A[${transA ? "k * P.M + r" : "r * P.K + k"}];
}
fn readB(k: u32, c: u32) -> f32 {
  if (k >= P.K || c >= P.N) { return 0.0; }
  return B[${transB ? "c * P.K + k" : "k * P.N + c"}];
}
@compute @workgroup_size(${S}, ${S}, 1)
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_id) l: vec3u) {
  let row0 = wg.y * TILE;
  let col0 = wg.x * TILE;
  let tid = l.y * S + l.x;
  var acc: array<f32, ${R * R}>;
  for (var k0 = 0u; k0 < P.K; k0 += D) {
    for (var e = tid; e < TILE * D; e += S * S) {
      ${loadA}
      As[k * TILE + r] = readA(row0 + r, k0 + k);
    }
    for (var e = tid; e < TILE * D; e += S * S) {
      ${loadB}
      Bs[k * TILE + c] = readB(k0 + k, col0 + c);
    }
    workgroupBarrier();
    for (var k = 0u; k < D; k++) {
      var a: array<f32, ${R}>;
      var b: array<f32, ${R}>;
      for (var i = 0u; i < R; i++) { a[i] = As[k * TILE + l.y + i * S]; b[i] = Bs[k * TILE + l.x + i * S]; }
      for (var i = 0u; i < R; i++) {
        for (var j = 0u; j < R; j++) { acc[i * R + j] = fma(a[i], b[j], acc[i * R + j]); }
      }
    }
    workgroupBarrier();
  }
  for (var i = 0u; i < R; i++) {
    let r = row0 + l.y + i * S;
    if (r >= P.M) { continue; }
    for (var j = 0u; j < R; j++) {
      let c = col0 + l.x + j * S;
      if (c >= P.N) { continue; }
      let idx = r * P.N + c;
      C[idx] = select(0.0, C[idx], P.accumulate != 0u) + acc[i * R + j];
    }
  }
}
`;
  });
}

export function matmul(ctx: GpuContext, a: GPUBuffer, b: GPUBuffer, c: GPUBuffer, s: MatmulShape): void {
  const tile = ctx.tuning.matmulSide * ctx.tuning.matmulMicro;
  ctx.dispatch(
    matmulKernel(ctx.tuning, s.transA === true, s.transB === true),
    { M: s.M, N: s.N, K: s.K, accumulate: s.accumulate === true ? 1 : 0 },
    [a, b, c],
    [groupsFor(s.N, tile), groupsFor(s.M, tile)],
  );
}
