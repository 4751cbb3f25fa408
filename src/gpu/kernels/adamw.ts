import { memoKernel, type GpuContext } from "../context.ts";
import { flatIndex, launch1d } from "./grid.ts";

/** Fused gradient scaling (global-norm clip) + AdamW with decoupled weight decay and bias correction:
 * g' = g * gradScale; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2; p -= lr wd p; p -= lr (m/bc1) / (sqrt(v/bc2) + eps). */

const LAYOUT = { n: "u32", lr: "f32", beta1: "f32", beta2: "f32", eps: "f32", weightDecay: "f32", bc1: "f32", bc2: "f32", gradScale: "f32" } as const;

export interface AdamWParams {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  /** 1 - beta1^step and 1 - beta2^step for the step being taken. */
  bc1: number;
  bc2: number;
  gradScale: number;
}

export function adamw(ctx: GpuContext, param: GPUBuffer, grad: GPUBuffer, m: GPUBuffer, v: GPUBuffer, n: number, p: AdamWParams): void {
  const wg = ctx.tuning.elementwise;
  const k = memoKernel(ctx.tuning, "adamw", LAYOUT, () => `
@group(0) @binding(1) var<storage, read_write> param: array<f32>;
@group(0) @binding(2) var<storage, read> grad: array<f32>;
@group(0) @binding(3) var<storage, read_write> m: array<f32>;
@group(0) @binding(4) var<storage, read_write> v: array<f32>;
@compute @workgroup_size(${wg})
fn main(@builtin(global_invocation_id) g: vec3u) {
  let i = ${flatIndex(wg)};
  if (i >= P.n) { return; }
  let gr = grad[i] * P.gradScale;
  let mi = P.beta1 * m[i] + (1.0 - P.beta1) * gr;
  let vi = P.beta2 * v[i] + (1.0 - P.beta2) * gr * gr;
  m[i] = mi;
  v[i] = vi;
  var w = param[i];
  w -= P.lr * P.weightDecay * w;
  w -= P.lr * (mi / P.bc1) / (sqrt(vi / P.bc2) + P.eps);
  param[i] = w;
}
`);
  ctx.dispatch(k, { n, ...p }, [param, grad, m, v], launch1d(ctx, n));
}
