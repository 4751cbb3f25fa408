import { ropeInvFreq, type RopeScaling } from "../../model/config.ts";
import type { GpuContext } from "../context.ts";
import { kernelBindings, memoKernel } from "../kernel-source.ts";
import { elementwiseMain, launch1d } from "./grid.ts";

/** Rotary embedding, HF rotate_half pairs (i, i + hd/2), in place on x [rows, heads*hd].
 * cos/sin come from a table built once in double precision ({@link ropeTable}) so the GPU angles match the
 * CPU reference instead of drifting with f32 pow/sin at large positions. The backward is the same
 * rotation with the sine negated (`inverse`). */

const ROPE = kernelBindings({
  uniforms: { rows: "u32", heads: "u32", half: "u32", sinSign: "f32", sinOffset: "u32" },
  buffers: { x: "read_write f32", positions: "read u32", table: "read f32" },
});

/** [maxPositions, hd/2] cos values followed by the same number of sin values. */
export function ropeTable(maxPositions: number, headDim: number, theta: number, scaling?: RopeScaling | null): Float32Array {
  const half = headDim / 2;
  const table = new Float32Array(2 * maxPositions * half);
  const invFreq = ropeInvFreq(headDim, theta, scaling);
  for (let i = 0; i < half; i++) {
    const inv = invFreq[i];
    for (let p = 0; p < maxPositions; p++) {
      table[p * half + i] = Math.cos(p * inv);
      table[maxPositions * half + p * half + i] = Math.sin(p * inv);
    }
  }
  return table;
}

export function rope(
  ctx: GpuContext,
  x: GPUBuffer,
  positions: GPUBuffer,
  table: GPUBuffer,
  maxPositions: number,
  rows: number,
  heads: number,
  headDim: number,
  inverse: boolean,
): void {
  const wg = ctx.tuning.elementwise;
  const half = headDim / 2;
  const k = memoKernel(ctx.tuning, "rope", ROPE, () =>
    elementwiseMain(
      wg,
      "P.rows * P.heads * P.half",
      `  let i = id % P.half;
  let rh = id / P.half;
  let row = rh / P.heads;
  let o = rh * 2u * P.half;
  let t = positions[row] * P.half + i;
  let c = table[t];
  let s = P.sinSign * table[P.sinOffset + t];
  let a = x[o + i];
  let b = x[o + i + P.half];
  x[o + i] = a * c - b * s;
  x[o + i + P.half] = b * c + a * s;`,
      "id",
    ),
  );
  ctx.dispatch(
    k,
    { rows, heads, half, sinSign: inverse ? -1 : 1, sinOffset: maxPositions * half },
    { x, positions, table },
    launch1d(ctx, rows * heads * half),
  );
}
