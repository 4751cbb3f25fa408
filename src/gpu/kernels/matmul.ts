import { groupsFor, type GpuContext } from "../context.ts";
import { kernelBindings, memoKernel, type UniformValues } from "../kernel-source.ts";
import type { GpuTuning } from "../tuning.ts";
import { weightAt, weightBinding, type WeightFormat } from "./weights.ts";

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
  /** How B is stored: float32 [default] or packed 16-bit frozen weights (weights.ts). */
  bFormat?: WeightFormat;
  /** Multiplies the product before it is stored or added [1]: LoRA's alpha / r (docs/lora.md). */
  scale?: number;
}

/** The bindings of C = op(A) @ op(B) with B stored in `bFormat` (shared with the few-rows kernel, matmul-rows.ts). */
export function matmulBindings(bFormat: WeightFormat) {
  return kernelBindings({
    uniforms: { M: "u32", N: "u32", K: "u32", accumulate: "u32", scale: "f32" },
    buffers: { A: "read f32", B: weightBinding(bFormat), C: "read_write f32" },
  });
}

/** The uniform values of a matmul dispatch (shared with the few-rows kernel). */
export function matmulUniforms(s: MatmulShape): UniformValues<ReturnType<typeof matmulBindings>["uniforms"]> {
  return { M: s.M, N: s.N, K: s.K, accumulate: s.accumulate === true ? 1 : 0, scale: s.scale ?? 1 };
}

/** WGSL `store(r, c, v)`: C[r, c] (=|+=) P.scale * v inside the M x N output (shared with the few-rows kernel). */
export const MATMUL_STORE = `fn store(r: u32, c: u32, v: f32) {
  if (r < P.M && c < P.N) {
    let idx = r * P.N + c;
    C[idx] = select(0.0, C[idx], P.accumulate != 0u) + P.scale * v;
  }
}`;

/** Register blocking is fixed at 4 x 4 (one vec4 accumulator per output row) so the kernel has no
 * dynamically indexed private arrays, which software adapters (lavapipe) spill to memory. */
const MICRO = 4;

/**
 * Tiled kernel: a side x side workgroup computes a (4 side) x (4 side) tile of C; each thread a 4 x 4 block
 * (4 consecutive rows, 4 consecutive columns) in four vec4 accumulators. A and B tiles of depth D are staged
 * in workgroup memory, k-major, B as vec4 so the inner loop is 4 scalar loads, 1 vec4 load and 4 vec4 FMAs.
 * Out-of-range rows, columns and k are zero-filled, so any M, N, K works.
 */
function matmulKernel(t: GpuTuning, transA: boolean, transB: boolean, bFormat: WeightFormat) {
  const key = `matmul_${transA ? "t" : "n"}${transB ? "t" : "n"}_${bFormat}`;
  return memoKernel(t, key, matmulBindings(bFormat), () => {
    const S = t.matmulSide;
    const D = t.matmulDepth;
    const TILE = S * MICRO;
    // Consecutive threads load consecutive addresses of the source layout.
    const loadA = transA ? `let r = e % TILE; let k = e / TILE;` : `let k = e % D; let r = e / D;`;
    const rows = [0, 1, 2, 3];
    return `
const S = ${S}u; const D = ${D}u; const TILE = ${TILE}u; const TILE4 = ${TILE / 4}u;
${weightAt("B", bFormat)}
var<workgroup> As: array<f32, ${TILE * D}>;
var<workgroup> Bs: array<vec4<f32>, ${(TILE * D) / 4}>;
fn readA(r: u32, k: u32) -> f32 {
  if (r >= P.M || k >= P.K) { return 0.0; }
  return A[${transA ? "k * P.M + r" : "r * P.K + k"}];
}
fn readB(k: u32, c: u32) -> f32 {
  if (k >= P.K || c >= P.N) { return 0.0; }
  return B_at(${transB ? "c * P.K + k" : "k * P.N + c"});
}
${MATMUL_STORE}
@compute @workgroup_size(${S}, ${S}, 1)
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_id) l: vec3u) {
  let row0 = wg.y * TILE;
  let col0 = wg.x * TILE;
  let tid = l.y * S + l.x;
${rows.map((i) => `  var acc${i} = vec4<f32>(0.0);`).join("\n")}
  for (var k0 = 0u; k0 < P.K; k0 += D) {
    for (var e = tid; e < TILE * D; e += S * S) {
      ${loadA}
      As[k * TILE + r] = readA(row0 + r, k0 + k);
    }
    for (var e = tid; e < TILE4 * D; e += S * S) {
      let c4 = e % TILE4; let k = e / TILE4;
      let c = col0 + c4 * 4u;
      Bs[k * TILE4 + c4] = vec4<f32>(readB(k0 + k, c), readB(k0 + k, c + 1u), readB(k0 + k, c + 2u), readB(k0 + k, c + 3u));
    }
    workgroupBarrier();
    for (var k = 0u; k < D; k++) {
      let b = Bs[k * TILE4 + l.x];
      let a = k * TILE + l.y * 4u;
${rows.map((i) => `      acc${i} = fma(vec4<f32>(As[a + ${i}u]), b, acc${i});`).join("\n")}
    }
    workgroupBarrier();
  }
  let r = row0 + l.y * 4u;
  let c = col0 + l.x * 4u;
${rows.map((i) => [0, 1, 2, 3].map((j) => `  store(r + ${i}u, c + ${j}u, acc${i}[${j}]);`).join("\n")).join("\n")}
}
`;
  });
}

export function matmul(ctx: GpuContext, a: GPUBuffer, b: GPUBuffer, c: GPUBuffer, s: MatmulShape): void {
  const tile = ctx.tuning.matmulSide * MICRO;
  ctx.dispatch(
    matmulKernel(ctx.tuning, s.transA === true, s.transB === true, s.bFormat ?? "f32"),
    matmulUniforms(s),
    { A: a, B: b, C: c },
    [groupsFor(s.N, tile), groupsFor(s.M, tile)],
  );
}
