/**
 * Optimizer references over flat buffers (PyTorch semantics), shared by the CPU trainer and used as
 * the oracle of the WebGPU grad-norm and fused AdamW kernels.
 */
import type { OptimizerOptions, OptimizerState } from "../train-types.ts";

export const OPTIMIZER_DEFAULTS: Required<OptimizerOptions> = {
  lr: 1e-5,
  beta1: 0.9,
  beta2: 0.999,
  eps: 1e-8,
  weightDecay: 0.01,
  maxGradNorm: 1.0,
};

/** The optimizer options of `o` (other keys ignored), defaults filled in. */
export function resolveOptimizerOptions(o: OptimizerOptions = {}): Required<OptimizerOptions> {
  const d = OPTIMIZER_DEFAULTS;
  return {
    lr: o.lr ?? d.lr,
    beta1: o.beta1 ?? d.beta1,
    beta2: o.beta2 ?? d.beta2,
    eps: o.eps ?? d.eps,
    weightDecay: o.weightDecay ?? d.weightDecay,
    maxGradNorm: o.maxGradNorm ?? d.maxGradNorm,
  };
}

/** sqrt(sum g^2), accumulated in double. NaN or Infinity when any element is not finite. */
export function globalGradNorm(grads: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < grads.length; i++) s += grads[i] * grads[i];
  return Math.sqrt(s);
}

/**
 * torch.nn.utils.clip_grad_norm_: scale by maxNorm / (norm + 1e-6) when that is below 1.
 * Returns the scale applied (1 when none; maxNorm <= 0 or Infinity disables clipping).
 */
export function clipGradNorm(grads: Float32Array | Float64Array, norm: number, maxNorm: number): number {
  if (!(maxNorm > 0) || maxNorm === Infinity) return 1;
  const coef = maxNorm / (norm + 1e-6);
  if (coef >= 1) return 1;
  for (let i = 0; i < grads.length; i++) grads[i] *= coef;
  return coef;
}

export function newOptimizerState(size: number): OptimizerState {
  return { step: 0, m: new Float32Array(size), v: new Float32Array(size) };
}

export function copyOptimizerState(o: OptimizerState): OptimizerState {
  return { step: o.step, m: o.m.slice(), v: o.v.slice() };
}

/**
 * A trainer step's update from its accumulated gradient: the global norm, then, when it and the loss are
 * finite, clipping and one AdamW step (`adamw`: the backend's); otherwise nothing changes (`skipped`).
 */
export function clippedAdamwStep(
  params: Float32Array,
  grads: Float32Array,
  state: OptimizerState,
  options: Required<OptimizerOptions>,
  loss: number,
  adamw: typeof adamwStep = adamwStep,
): { gradNorm: number; skipped: boolean } {
  const gradNorm = globalGradNorm(grads);
  const skipped = !Number.isFinite(loss) || !Number.isFinite(gradNorm);
  if (!skipped) {
    clipGradNorm(grads, gradNorm, options.maxGradNorm);
    adamw(params, grads, state, options);
  }
  return { gradNorm, skipped };
}

/**
 * One AdamW step in place (torch.optim.AdamW): step += 1; p *= 1 - lr wd (decoupled, on every tensor);
 * m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr/(1 - b1^step) * m / (sqrt(v)/sqrt(1 - b2^step) + eps).
 */
export function adamwStep(params: Float32Array, grads: ArrayLike<number>, state: OptimizerState, o: Required<OptimizerOptions>): void {
  state.step += 1;
  const { lr, beta1: b1, beta2: b2, eps, weightDecay: wd } = o;
  const stepSize = lr / (1 - Math.pow(b1, state.step));
  const bc2Sqrt = Math.sqrt(1 - Math.pow(b2, state.step));
  const decay = 1 - lr * wd;
  const { m, v } = state;
  for (let i = 0; i < params.length; i++) {
    const g = grads[i];
    m[i] = b1 * m[i] + (1 - b1) * g;
    v[i] = b2 * v[i] + (1 - b2) * g * g;
    params[i] = params[i] * decay - (stepSize * m[i]) / (Math.sqrt(v[i]) / bc2Sqrt + eps);
  }
}
