import { memoKernel, type GpuContext } from "../context.ts";
import { flatIndex, launch1d } from "./grid.ts";
import { columnSums } from "./reduce.ts";

const LAYOUT = { n: "u32", cols: "u32" } as const;

/** x[r, j] += bias[j] in place, x [rows, cols] (the q/k/v projection biases of Qwen2). */
export function addBias(ctx: GpuContext, x: GPUBuffer, bias: GPUBuffer, rows: number, cols: number): void {
  const wg = ctx.tuning.elementwise;
  const n = rows * cols;
  const k = memoKernel(
    ctx.tuning,
    "add_bias",
    LAYOUT,
    () => `
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@compute @workgroup_size(${wg})
fn main(@builtin(global_invocation_id) g: vec3u) {
  let i = ${flatIndex(wg)};
  if (i >= P.n) { return; }
  x[i] = x[i] + bias[i % P.cols];
}
`,
  );
  ctx.dispatch(k, { n, cols }, [x, bias], launch1d(ctx, n));
}

/** dbias[j] += sum over rows of dy[r, j] (the bias gradient, added over micro-batches; deterministic order). */
export function biasBackward(ctx: GpuContext, dy: GPUBuffer, dbias: GPUBuffer, rows: number, cols: number): void {
  columnSums(ctx, dy, dbias, rows, cols, 0, true);
}
