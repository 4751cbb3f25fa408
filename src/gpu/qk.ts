/**
 * What happens to q, k and v between their projections and RoPE in the Hugging Face architectures
 * (src/model/config.ts): q/k/v biases (Qwen2), then per-head RMSNorm of q and k (Qwen3), and the
 * gradients of both. Shared by the model's forward and backward and the KV-cached decoder.
 */
import { headDim, type ModelConfig } from "../model/config.ts";
import type { GpuContext } from "./context.ts";
import { addBias, biasBackward } from "./kernels/bias.ts";
import { rmsnormBackwardInput, rmsnormBackwardWeight, rmsnorm } from "./kernels/rmsnorm.ts";

/**
 * One layer's q, k, v [rows, heads*hd | kv*hd] as RoPE reads them, and where the projections land: with
 * qk-norm, `qProj`/`kProj` hold the projections (plus bias), the input the norm's backward needs, and
 * `qRstd`/`kRstd` the per-head reciprocal RMS; without it they are q and k themselves and the rstds null.
 */
export interface QkvBuffers {
  q: GPUBuffer;
  k: GPUBuffer;
  v: GPUBuffer;
  qProj: GPUBuffer;
  kProj: GPUBuffer;
  qRstd: GPUBuffer | null;
  kRstd: GPUBuffer | null;
}

/** The norm's side of {@link QkvBuffers} for `rows` token rows, or null when the config has no qk-norm. */
export function allocQkNorm(
  c: ModelConfig,
  rows: number,
  alloc: (n: number, label: string) => GPUBuffer,
): Pick<QkvBuffers, "qProj" | "kProj" | "qRstd" | "kRstd"> | null {
  if (!c.qk_norm) return null;
  const hd = headDim(c);
  return {
    qProj: alloc(rows * c.n_heads * hd, "qk.q_proj"),
    kProj: alloc(rows * c.n_kv_heads * hd, "qk.k_proj"),
    qRstd: alloc(rows * c.n_heads, "qk.q_rstd"),
    kRstd: alloc(rows * c.n_kv_heads, "qk.k_rstd"),
  };
}

/** q, k, v plus the norm buffers (or q and k standing in for the projections). */
export function qkvBuffers(
  q: GPUBuffer,
  k: GPUBuffer,
  v: GPUBuffer,
  norm: Pick<QkvBuffers, "qProj" | "kProj" | "qRstd" | "kRstd"> | null,
): QkvBuffers {
  return norm === null ? { q, k, v, qProj: q, kProj: k, qRstd: null, kRstd: null } : { q, k, v, ...norm };
}

/** After the projections filled b.qProj, b.kProj and b.v: biases, then per-head norms into b.q and b.k. */
export function finishQkv(ctx: GpuContext, c: ModelConfig, p: (name: string) => GPUBuffer, b: QkvBuffers, rows: number): void {
  const hd = headDim(c);
  if (c.qkv_bias) {
    addBias(ctx, b.qProj, p("bq"), rows, c.n_heads * hd);
    addBias(ctx, b.kProj, p("bk"), rows, c.n_kv_heads * hd);
    addBias(ctx, b.v, p("bv"), rows, c.n_kv_heads * hd);
  }
  if (b.qRstd !== null && b.kRstd !== null) {
    // each head's hd values are one RMSNorm row
    rmsnorm(ctx, b.qProj, p("q_norm"), b.q, b.qRstd, rows * c.n_heads, hd, c.norm_eps);
    rmsnorm(ctx, b.kProj, p("k_norm"), b.k, b.kRstd, rows * c.n_kv_heads, hd, c.norm_eps);
  }
}

/** Gradient buffers of one layer's q/k/v step: dq, dk (w.r.t. q and k before RoPE, after the norm), dv, and
 * with qk-norm, room for the gradients w.r.t. the projections (`dqProj`, `dkProj`). */
export interface QkvGrads {
  dq: GPUBuffer;
  dk: GPUBuffer;
  dv: GPUBuffer;
  dqProj: GPUBuffer | null;
  dkProj: GPUBuffer | null;
}

/**
 * Backward of {@link finishQkv}: adds the q/k-norm weight and bias gradients into `g(...)` (none when `g` is
 * null: a frozen base) and returns the buffers holding the gradients w.r.t. the q and k projections (dq/dk
 * themselves when there is no norm).
 */
export function finishQkvBackward(
  ctx: GpuContext,
  c: ModelConfig,
  p: (name: string) => GPUBuffer,
  g: ((name: string) => GPUBuffer) | null,
  b: QkvBuffers,
  d: QkvGrads,
  rows: number,
): { dq: GPUBuffer; dk: GPUBuffer } {
  const hd = headDim(c);
  let dq = d.dq;
  let dk = d.dk;
  if (b.qRstd !== null && b.kRstd !== null && d.dqProj !== null && d.dkProj !== null) {
    const qRows = rows * c.n_heads;
    const kRows = rows * c.n_kv_heads;
    if (g) rmsnormBackwardWeight(ctx, b.qProj, b.qRstd, d.dq, g("q_norm"), qRows, hd);
    rmsnormBackwardInput(ctx, b.qProj, p("q_norm"), b.qRstd, d.dq, d.dqProj, qRows, hd, false);
    if (g) rmsnormBackwardWeight(ctx, b.kProj, b.kRstd, d.dk, g("k_norm"), kRows, hd);
    rmsnormBackwardInput(ctx, b.kProj, p("k_norm"), b.kRstd, d.dk, d.dkProj, kRows, hd, false);
    dq = d.dqProj;
    dk = d.dkProj;
  }
  if (g && c.qkv_bias) {
    biasBackward(ctx, dq, g("bq"), rows, c.n_heads * hd);
    biasBackward(ctx, dk, g("bk"), rows, c.n_kv_heads * hd);
    biasBackward(ctx, d.dv, g("bv"), rows, c.n_kv_heads * hd);
  }
  return { dq, dk };
}
