import { groupsFor, type GpuContext } from "../context.ts";
import { memoKernel } from "../kernel-source.ts";
import type { GpuTuning } from "../tuning.ts";
import { MATMUL_STORE, matmul, matmulBindings, matmulUniforms, type MatmulShape } from "./matmul.ts";
import { weightAt } from "./weights.ts";

/**
 * C[M,N] (=|+=) A[M,K] @ op(B) for a few rows M, as in a decode step (M = sequences in the batch). The
 * tiled matmul computes (4 side)-row tiles, so at M = 2 nearly all of its work is padding; here each
 * thread owns one output column for a block of 4 rows (one vec4 accumulator), the 4 rows of A are
 * staged in workgroup memory k-chunk by k-chunk, and B is streamed once per row block: reads of B[k, c]
 * by consecutive threads are consecutive (transB reads row c of B[N,K] along k instead).
 */

/** Below this many rows the row kernel does less work than the tiled one. */
export const FEW_ROWS = 16;

/** Threads per workgroup (one output column each) and k values staged per chunk. */
function sizes(t: GpuTuning): { threads: number; chunk: number } {
  const threads = Math.min(64, t.elementwise);
  return { threads, chunk: Math.max(1, Math.min(256, Math.floor(t.workgroupStorageBytes / 16))) };
}

export function matmulRows(ctx: GpuContext, a: GPUBuffer, b: GPUBuffer, c: GPUBuffer, s: Omit<MatmulShape, "transA">): void {
  const { threads: W, chunk: KC } = sizes(ctx.tuning);
  const transB = s.transB === true;
  const bFormat = s.bFormat ?? "f32";
  const kernel = memoKernel(
    ctx.tuning,
    `matmul_rows_${transB ? "t" : "n"}_${bFormat}`,
    matmulBindings(bFormat),
    () => `
const W = ${W}u; const KC = ${KC}u;
${weightAt("B", bFormat)}
var<workgroup> As: array<vec4<f32>, ${KC}>;
fn readA(r: u32, k: u32) -> f32 {
  if (r >= P.M) { return 0.0; }
  return A[r * P.K + k];
}
${MATMUL_STORE}
@compute @workgroup_size(${W})
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let c = wg.x * W + lid;
  let r0 = wg.y * 4u;
  var acc = vec4<f32>(0.0);
  for (var k0 = 0u; k0 < P.K; k0 += KC) {
    let kEnd = min(KC, P.K - k0);
    for (var e = lid; e < kEnd; e += W) {
      let k = k0 + e;
      As[e] = vec4<f32>(readA(r0, k), readA(r0 + 1u, k), readA(r0 + 2u, k), readA(r0 + 3u, k));
    }
    workgroupBarrier();
    if (c < P.N) {
      for (var kk = 0u; kk < kEnd; kk++) {
        acc = fma(As[kk], vec4<f32>(B_at(${transB ? "c * P.K + k0 + kk" : "(k0 + kk) * P.N + c"})), acc);
      }
    }
    workgroupBarrier();
  }
  if (c < P.N) {
    store(r0, c, acc.x);
    store(r0 + 1u, c, acc.y);
    store(r0 + 2u, c, acc.z);
    store(r0 + 3u, c, acc.w);
  }
}
`,
  );
  ctx.dispatch(kernel, matmulUniforms(s), { A: a, B: b, C: c }, [groupsFor(s.N, W), groupsFor(s.M, 4)]);
}

/** y = x @ op(W) with the kernel that suits the row count: the row kernel for a few rows, else the tiled one. */
export function linear(ctx: GpuContext, a: GPUBuffer, b: GPUBuffer, c: GPUBuffer, s: Omit<MatmulShape, "transA">): void {
  if (s.M <= FEW_ROWS) matmulRows(ctx, a, b, c, s);
  else matmul(ctx, a, b, c, s);
}
