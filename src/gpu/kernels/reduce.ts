import type { GpuContext } from "../context.ts";
import { kernelBindings, memoKernel } from "../kernel-source.ts";
import { treeSumWgsl } from "./reduce-wgsl.ts";

/** Deterministic reductions: fixed thread/stride assignment and tree sums, so repeated runs are bit-identical. */

const COLS = kernelBindings({
  uniforms: { rows: "u32", cols: "u32", outOffset: "u32", accumulate: "u32" },
  buffers: { src: "read f32", out: "read_write f32" },
});

/** out[outOffset + c] (=|+=) sum over rows of src[r, c] for a [rows, cols] matrix; one workgroup per column.
 * `accumulate` adds into out (gradients summed over micro-batches). */
export function columnSums(
  ctx: GpuContext,
  src: GPUBuffer,
  out: GPUBuffer,
  rows: number,
  cols: number,
  outOffset = 0,
  accumulate = false,
): void {
  const t = ctx.tuning.rowThreads;
  const k = memoKernel(
    ctx.tuning,
    "column_sums",
    COLS,
    () => `
${treeSumWgsl(t)}
@compute @workgroup_size(${t})
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let c = wg.x;
  var s = 0.0;
  for (var r = lid; r < P.rows; r += THREADS) { s += src[r * P.cols + c]; }
  let total = treeSum(lid, s);
  if (lid == 0u) { out[P.outOffset + c] = select(0.0, out[P.outOffset + c], P.accumulate != 0u) + total; }
}
`,
  );
  ctx.dispatch(k, { rows, cols, outOffset, accumulate: accumulate ? 1 : 0 }, { src, out }, [cols]);
}

const SQ = kernelBindings({ uniforms: { n: "u32", slot: "u32", groups: "u32" }, buffers: { x: "read f32", partials: "read_write f32" } });

/** Workgroups per tensor in {@link sumSquares}; partial sums land in partials[slot * SUMSQ_GROUPS + g]. */
export const SUMSQ_GROUPS = 32;

/** Partial sums of x^2 of one tensor into `partials` (SUMSQ_GROUPS slots from slot * SUMSQ_GROUPS). */
export function sumSquares(ctx: GpuContext, x: GPUBuffer, n: number, partials: GPUBuffer, slot: number): void {
  const t = ctx.tuning.rowThreads;
  const k = memoKernel(
    ctx.tuning,
    "sum_squares",
    SQ,
    () => `
${treeSumWgsl(t)}
@compute @workgroup_size(${t})
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) lid: u32) {
  var s = 0.0;
  for (var i = wg.x * THREADS + lid; i < P.n; i += P.groups * THREADS) { s = fma(x[i], x[i], s); }
  let total = treeSum(lid, s);
  if (lid == 0u) { partials[P.slot * P.groups + wg.x] = total; }
}
`,
  );
  ctx.dispatch(k, { n, slot, groups: SUMSQ_GROUPS }, { x, partials }, [SUMSQ_GROUPS]);
}
