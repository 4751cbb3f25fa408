/**
 * What happens to q, k and v between their projections and RoPE in the Hugging Face architectures
 * (src/model/config.ts): q/k/v biases (Qwen2), then per-head RMSNorm of q and k (Qwen3). Shared by the
 * model's forward and the KV-cached decoder; forward only (training these features on the GPU comes
 * with the adapters).
 */
import { headDim, type ModelConfig } from "../model/config.ts";
import type { GpuContext } from "./context.ts";
import { addBias } from "./kernels/bias.ts";
import { rmsnormForward } from "./kernels/rmsnorm.ts";

/** Scratch for the per-head norm of `rows` token rows (null when the config has no qk-norm). */
export interface QkScratch {
  qNorm: GPUBuffer;
  kNorm: GPUBuffer;
  rstd: GPUBuffer;
}

export function qkScratch(c: ModelConfig, rows: number, alloc: (n: number, label: string) => GPUBuffer): QkScratch | null {
  if (!c.qk_norm) return null;
  const hd = headDim(c);
  return {
    qNorm: alloc(rows * c.n_heads * hd, "qk.q_norm"),
    kNorm: alloc(rows * c.n_kv_heads * hd, "qk.k_norm"),
    rstd: alloc(rows * c.n_heads, "qk.rstd"),
  };
}

/** Biases and per-head norms on q [rows, heads*hd], k and v [rows, kv*hd], in place. */
export function finishQkv(
  ctx: GpuContext,
  c: ModelConfig,
  p: (name: string) => GPUBuffer,
  q: GPUBuffer,
  k: GPUBuffer,
  v: GPUBuffer,
  rows: number,
  scratch: QkScratch | null,
): void {
  const hd = headDim(c);
  if (c.qkv_bias) {
    addBias(ctx, q, p("bq"), rows, c.n_heads * hd);
    addBias(ctx, k, p("bk"), rows, c.n_kv_heads * hd);
    addBias(ctx, v, p("bv"), rows, c.n_kv_heads * hd);
  }
  if (c.qk_norm && scratch) {
    // each head's hd values are one RMSNorm row; the result goes back over q and k
    rmsnormForward(ctx, q, p("q_norm"), scratch.qNorm, scratch.rstd, rows * c.n_heads, hd, c.norm_eps);
    ctx.copy(scratch.qNorm, q, rows * c.n_heads * hd * 4);
    rmsnormForward(ctx, k, p("k_norm"), scratch.kNorm, scratch.rstd, rows * c.n_kv_heads, hd, c.norm_eps);
    ctx.copy(scratch.kNorm, k, rows * c.n_kv_heads * hd * 4);
  }
}
