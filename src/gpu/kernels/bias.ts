import type { GpuContext } from "../context.ts";
import { kernelBindings, memoKernel } from "../kernel-source.ts";
import { elementwiseMain, launch1d } from "./grid.ts";
import { columnSums } from "./reduce.ts";

const ADD_BIAS = kernelBindings({ uniforms: { n: "u32", cols: "u32" }, buffers: { x: "read_write f32", bias: "read f32" } });

/** x[r, j] += bias[j] in place, x [rows, cols] (the q/k/v projection biases of Qwen2). */
export function addBias(ctx: GpuContext, x: GPUBuffer, bias: GPUBuffer, rows: number, cols: number): void {
  const wg = ctx.tuning.elementwise;
  const n = rows * cols;
  const k = memoKernel(ctx.tuning, "add_bias", ADD_BIAS, () => elementwiseMain(wg, "P.n", "  x[i] = x[i] + bias[i % P.cols];"));
  ctx.dispatch(k, { n, cols }, { x, bias }, launch1d(ctx, n));
}

/** dbias[j] += sum over rows of dy[r, j] (the bias gradient, added over micro-batches; deterministic order). */
export function biasBackward(ctx: GpuContext, dy: GPUBuffer, dbias: GPUBuffer, rows: number, cols: number): void {
  columnSums(ctx, dy, dbias, rows, cols, 0, true);
}
