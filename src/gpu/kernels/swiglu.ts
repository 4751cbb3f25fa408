import { memoKernel, type GpuContext } from "../context.ts";
import { flatIndex, launch1d } from "./grid.ts";

const N_ONLY = { n: "u32" } as const;

/** y = silu(gate) * up. */
export function swigluForward(ctx: GpuContext, gate: GPUBuffer, up: GPUBuffer, y: GPUBuffer, n: number): void {
  const wg = ctx.tuning.elementwise;
  const k = memoKernel(
    ctx.tuning,
    "swiglu_fwd",
    N_ONLY,
    () => `
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(${wg})
fn main(@builtin(global_invocation_id) g: vec3u) {
  let i = ${flatIndex(wg)};
  if (i >= P.n) { return; }
  let z = gate[i];
  y[i] = z / (1.0 + exp(-z)) * up[i];
}
`,
  );
  ctx.dispatch(k, { n }, [gate, up, y], launch1d(ctx, n));
}

/** dgate = dy * up * s (1 + g (1 - s)), dup = dy * silu(g); written over gate and up's gradient buffers. */
export function swigluBackward(
  ctx: GpuContext,
  gate: GPUBuffer,
  up: GPUBuffer,
  dy: GPUBuffer,
  dgate: GPUBuffer,
  dup: GPUBuffer,
  n: number,
): void {
  const wg = ctx.tuning.elementwise;
  const k = memoKernel(
    ctx.tuning,
    "swiglu_bwd",
    N_ONLY,
    () => `
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
@group(0) @binding(4) var<storage, read_write> dgate: array<f32>;
@group(0) @binding(5) var<storage, read_write> dup: array<f32>;
@compute @workgroup_size(${wg})
fn main(@builtin(global_invocation_id) g: vec3u) {
  let i = ${flatIndex(wg)};
  if (i >= P.n) { return; }
  let z = gate[i];
  let s = 1.0 / (1.0 + exp(-z));
  dgate[i] = dy[i] * up[i] * s * (1.0 + z * (1.0 - s));
  dup[i] = dy[i] * z * s;
}
`,
  );
  ctx.dispatch(k, { n }, [gate, up, dy, dgate, dup], launch1d(ctx, n));
}
