import type { GpuContext } from "../context.ts";
import { kernelBindings, memoKernel } from "../kernel-source.ts";
import { elementwiseMain, launch1d } from "./grid.ts";

/** Fused gradient scaling (global-norm clip) + AdamW, in the same arithmetic form as the CPU reference
 * (src/model/reference/optim.ts, torch.optim.AdamW): g' = g * gradScale; m = b1 m + (1-b1) g';
 * v = b2 v + (1-b2) g'^2; p = p * decay - stepSize * m / (sqrt(v) / bc2Sqrt + eps)
 * with decay = 1 - lr wd, stepSize = lr / (1 - b1^step), bc2Sqrt = sqrt(1 - b2^step). */

const BINDINGS = kernelBindings({
  uniforms: {
    n: "u32",
    beta1: "f32",
    beta2: "f32",
    eps: "f32",
    decay: "f32",
    stepSize: "f32",
    bc2Sqrt: "f32",
    gradScale: "f32",
  },
  buffers: { param: "read_write f32", grad: "read f32", m: "read_write f32", v: "read_write f32" },
});

export interface AdamWParams {
  beta1: number;
  beta2: number;
  eps: number;
  decay: number;
  stepSize: number;
  bc2Sqrt: number;
  gradScale: number;
}

/** The per-step scalars of {@link AdamWParams} for optimizer step `step` (1-based). */
export function adamwScalars(
  o: { lr: number; beta1: number; beta2: number; eps: number; weightDecay: number },
  step: number,
  gradScale: number,
): AdamWParams {
  return {
    beta1: o.beta1,
    beta2: o.beta2,
    eps: o.eps,
    decay: 1 - o.lr * o.weightDecay,
    stepSize: o.lr / (1 - Math.pow(o.beta1, step)),
    bc2Sqrt: Math.sqrt(1 - Math.pow(o.beta2, step)),
    gradScale,
  };
}

export function adamw(ctx: GpuContext, param: GPUBuffer, grad: GPUBuffer, m: GPUBuffer, v: GPUBuffer, n: number, p: AdamWParams): void {
  const wg = ctx.tuning.elementwise;
  const k = memoKernel(ctx.tuning, "adamw", BINDINGS, () =>
    elementwiseMain(
      wg,
      "P.n",
      `  let gr = grad[i] * P.gradScale;
  let mi = P.beta1 * m[i] + (1.0 - P.beta1) * gr;
  let vi = P.beta2 * v[i] + (1.0 - P.beta2) * gr * gr;
  m[i] = mi;
  v[i] = vi;
  param[i] = param[i] * P.decay - P.stepSize * mi / (sqrt(vi) / P.bc2Sqrt + P.eps);`,
    ),
  );
  ctx.dispatch(k, { n, ...p }, { param, grad, m, v }, launch1d(ctx, n));
}
