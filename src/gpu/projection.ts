/**
 * One linear projection of a layer, `y = x · W`, with an optional LoRA adapter applied unmerged:
 * `y = x · W + scaling · (x · lora_a) · lora_b` (docs/lora.md), as kernel dispatches. The forward, the
 * backward and the KV-cached decode all go through here, so the adapter's math exists once.
 * Shapes: x [M, K], W [K, N], lora_a [K, r], lora_b [r, N], the adapter's t = x · lora_a [M, r].
 */
import { LightningError } from "../types/errors.ts";
import type { GpuContext } from "./context.ts";
import type { AdapterTensors } from "./lora.ts";
import { matmul, type MatmulShape } from "./kernels/matmul.ts";
import { linear } from "./kernels/matmul-rows.ts";
import type { WeightFormat } from "./kernels/weights.ts";

/** The weights of one projection as a pass uses them. */
export interface ProjectionWeights {
  w: GPUBuffer;
  format: WeightFormat;
  /** W's gradient when the base trains (full fine-tuning), else null. */
  gw: GPUBuffer | null;
  /** The adapter on this projection, when there is one and the pass applies it. */
  lora: AdapterTensors | null;
}

export interface ProjectionDims {
  M: number;
  K: number;
  N: number;
  /** Add into y (forward) or dx (backward) instead of overwriting it. */
  accumulate?: boolean;
}

/** A matmul dispatcher: `linear` (matmul-rows.ts), which picks the few-rows kernel for short inputs and the
 * tiled one otherwise (a micro-batch of a few tokens would pad the tiled kernel's 64-row tiles), or one kernel. */
export type MatmulFn = (ctx: GpuContext, a: GPUBuffer, b: GPUBuffer, c: GPUBuffer, s: Omit<MatmulShape, "transA">) => void;

function needT(t: GPUBuffer | null): GPUBuffer {
  if (t === null) throw new LightningError("an adapted projection needs a buffer for x · lora_a");
  return t;
}

/** t = x · lora_a: the adapter's half of the forward that the backward needs (recomputed on its own by
 * activation checkpointing for the one projection whose output it does not need; with the forward's `mm`,
 * so the recomputed t is bit for bit the forward's). */
export function adapterInput(
  ctx: GpuContext,
  p: ProjectionWeights,
  x: GPUBuffer,
  t: GPUBuffer | null,
  d: ProjectionDims,
  mm: MatmulFn = linear,
): void {
  if (p.lora !== null) mm(ctx, x, p.lora.a, needT(t), { M: d.M, K: d.K, N: p.lora.r });
}

/** y (=|+=) x · W, then y += scaling · t · lora_b with t = x · lora_a kept in `t`. */
export function projectForward(
  ctx: GpuContext,
  p: ProjectionWeights,
  x: GPUBuffer,
  y: GPUBuffer,
  t: GPUBuffer | null,
  d: ProjectionDims,
  mm: MatmulFn = linear,
): void {
  mm(ctx, x, p.w, y, { M: d.M, K: d.K, N: d.N, accumulate: d.accumulate, bFormat: p.format });
  if (p.lora === null) return;
  adapterInput(ctx, p, x, t, d, mm);
  mm(ctx, needT(t), p.lora.b, y, { M: d.M, K: p.lora.r, N: d.N, accumulate: true, scale: p.lora.scaling });
}

/**
 * Given dy [M, N]: dx (=|+=) dy · Wᵀ; W's gradient += xᵀ · dy when the base trains; with an adapter,
 * dt = scaling · dy · lora_bᵀ (in `dt`), lora_b's gradient += scaling · tᵀ · dy, lora_a's += xᵀ · dt, and
 * dx += dt · lora_aᵀ. `t` is the forward's x · lora_a.
 */
export function projectBackward(
  ctx: GpuContext,
  p: ProjectionWeights,
  x: GPUBuffer,
  dy: GPUBuffer,
  dx: GPUBuffer,
  t: GPUBuffer | null,
  dt: GPUBuffer | null,
  d: ProjectionDims,
): void {
  const { M, K, N } = d;
  linear(ctx, dy, p.w, dx, { M, K: N, N: K, transB: true, accumulate: d.accumulate, bFormat: p.format });
  if (p.gw !== null) matmul(ctx, x, dy, p.gw, { M: K, K: M, N, transA: true, accumulate: true });
  const a = p.lora;
  if (a === null) return;
  if (dt === null) throw new LightningError("an adapted projection's backward needs a buffer for dt");
  const r = a.r;
  linear(ctx, dy, a.b, dt, { M, K: N, N: r, transB: true, scale: a.scaling });
  if (a.gb !== null) matmul(ctx, needT(t), dy, a.gb, { M: r, K: M, N, transA: true, accumulate: true, scale: a.scaling });
  if (a.ga !== null) matmul(ctx, x, dt, a.ga, { M: K, K: M, N: r, transA: true, accumulate: true });
  linear(ctx, dt, a.a, dx, { M, K: r, N: K, transB: true, accumulate: true });
}
