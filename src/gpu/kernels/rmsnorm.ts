import { groupsFor, type GpuContext } from "../context.ts";
import { kernelBindings, memoKernel } from "../kernel-source.ts";
import { split2d } from "./grid.ts";
import { rowMain } from "./reduce-wgsl.ts";

/** RMSNorm y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) per row, one workgroup per row. */

const FWD = kernelBindings({
  uniforms: { rows: "u32", dim: "u32", eps: "f32" },
  buffers: { x: "read f32", w: "read f32", y: "read_write f32", rstd: "read_write f32" },
});
const BWD = kernelBindings({
  uniforms: { rows: "u32", dim: "u32", accumulate: "u32" },
  buffers: { x: "read f32", w: "read f32", rstd: "read f32", dy: "read f32", dx: "read_write f32" },
});

export function rmsnorm(
  ctx: GpuContext,
  x: GPUBuffer,
  w: GPUBuffer,
  y: GPUBuffer,
  rstd: GPUBuffer,
  rows: number,
  dim: number,
  eps: number,
): void {
  const t = ctx.tuning.rowThreads;
  const k = memoKernel(ctx.tuning, "rmsnorm_fwd", FWD, () =>
    rowMain(
      t,
      `  let o = row * P.dim;
  var ss = 0.0;
  for (var j = lid; j < P.dim; j += THREADS) { ss = fma(x[o + j], x[o + j], ss); }
  let rs = inverseSqrt(treeSum(lid, ss) / f32(P.dim) + P.eps);
  if (lid == 0u) { rstd[row] = rs; }
  for (var j = lid; j < P.dim; j += THREADS) { y[o + j] = x[o + j] * rs * w[j]; }`,
    ),
  );
  ctx.dispatch(k, { rows, dim, eps }, { x, w, y, rstd }, split2d(rows));
}

/** dx (=|+=) rstd w dy - rstd^3/dim x sum(dy w x), per row; `accumulate` adds into dx (residual stream gradient). */
export function rmsnormBackwardInput(
  ctx: GpuContext,
  x: GPUBuffer,
  w: GPUBuffer,
  rstd: GPUBuffer,
  dy: GPUBuffer,
  dx: GPUBuffer,
  rows: number,
  dim: number,
  accumulate: boolean,
): void {
  const t = ctx.tuning.rowThreads;
  const k = memoKernel(ctx.tuning, "rmsnorm_bwd_dx", BWD, () =>
    rowMain(
      t,
      `  let o = row * P.dim;
  var d = 0.0;
  for (var j = lid; j < P.dim; j += THREADS) { d = fma(dy[o + j] * w[j], x[o + j], d); }
  let rs = rstd[row];
  let c = rs * rs * rs * treeSum(lid, d) / f32(P.dim);
  for (var j = lid; j < P.dim; j += THREADS) {
    let v = rs * w[j] * dy[o + j] - c * x[o + j];
    dx[o + j] = select(0.0, dx[o + j], P.accumulate != 0u) + v;
  }`,
    ),
  );
  ctx.dispatch(k, { rows, dim, accumulate: accumulate ? 1 : 0 }, { x, w, rstd, dy, dx }, split2d(rows));
}

const DW = kernelBindings({
  uniforms: { rows: "u32", dim: "u32" },
  buffers: { x: "read f32", rstd: "read f32", dy: "read f32", dw: "read_write f32" },
});

/** dw[j] += sum over rows of dy[r,j] x[r,j] rstd[r]; one thread per column, rows in order (deterministic). */
export function rmsnormBackwardWeight(
  ctx: GpuContext,
  x: GPUBuffer,
  rstd: GPUBuffer,
  dy: GPUBuffer,
  dw: GPUBuffer,
  rows: number,
  dim: number,
): void {
  const wg = ctx.tuning.elementwise;
  const k = memoKernel(
    ctx.tuning,
    "rmsnorm_bwd_dw",
    DW,
    () => `
@compute @workgroup_size(${wg})
fn main(@builtin(global_invocation_id) g: vec3u) {
  let j = g.x;
  if (j >= P.dim) { return; }
  var acc = 0.0;
  for (var r = 0u; r < P.rows; r++) { acc = fma(dy[r * P.dim + j] * x[r * P.dim + j], rstd[r], acc); }
  dw[j] += acc;
}
`,
  );
  ctx.dispatch(k, { rows, dim }, { x, rstd, dy, dw }, [groupsFor(dim, wg)]);
}
