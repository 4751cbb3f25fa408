import { groupsFor, type GpuContext } from "../context.ts";
import { kernelBindings, memoKernel } from "../kernel-source.ts";
import { weightAt, weightBinding, type WeightFormat } from "./weights.ts";
import { elementwiseMain, launch1d } from "./grid.ts";

/** out[r, :] = table[ids[r], :]; backward scatter-adds rows of dOut into dTable without atomics
 * (float atomics do not exist in WGSL): each thread owns one (column, vocab-chunk) and walks the tokens
 * in order, so the sum order is fixed and runs are bit-identical. */

const gatherBindings = (tableFormat: WeightFormat) =>
  kernelBindings({
    uniforms: { rows: "u32", dim: "u32" },
    buffers: { ids: "read u32", table: weightBinding(tableFormat), out: "read_write f32" },
  });
const SCATTER = kernelBindings({
  uniforms: { rows: "u32", dim: "u32", vocab: "u32", chunk: "u32" },
  buffers: { ids: "read u32", dOut: "read f32", dTable: "read_write f32" },
});

/** Vocab rows per scatter thread: trades parallelism against re-reading the ids. */
const VOCAB_CHUNK = 32;

export function embedding(
  ctx: GpuContext,
  ids: GPUBuffer,
  table: GPUBuffer,
  out: GPUBuffer,
  rows: number,
  dim: number,
  tableFormat: WeightFormat = "f32",
): void {
  const wg = ctx.tuning.elementwise;
  const k = memoKernel(
    ctx.tuning,
    `embedding_gather_${tableFormat}`,
    gatherBindings(tableFormat),
    () => `
${weightAt("table", tableFormat)}
${elementwiseMain(
  wg,
  "P.rows * P.dim",
  `  let r = i / P.dim;
  out[i] = table_at(ids[r] * P.dim + i % P.dim);`,
)}`,
  );
  ctx.dispatch(k, { rows, dim }, { ids, table, out }, launch1d(ctx, rows * dim));
}

/** dTable[v, :] += sum over rows with ids[r] == v of dOut[r, :] (accumulates: gradients are zeroed per step). */
export function embeddingBackward(
  ctx: GpuContext,
  ids: GPUBuffer,
  dOut: GPUBuffer,
  dTable: GPUBuffer,
  rows: number,
  dim: number,
  vocab: number,
): void {
  const wg = ctx.tuning.elementwise;
  const k = memoKernel(
    ctx.tuning,
    "embedding_scatter",
    SCATTER,
    () => `
@compute @workgroup_size(${wg})
fn main(@builtin(global_invocation_id) g: vec3u) {
  let c = g.x;
  if (c >= P.dim) { return; }
  let v0 = g.y * P.chunk;
  let v1 = min(v0 + P.chunk, P.vocab);
  for (var r = 0u; r < P.rows; r++) {
    let v = ids[r];
    if (v >= v0 && v < v1) { dTable[v * P.dim + c] += dOut[r * P.dim + c]; }
  }
}
`,
  );
  ctx.dispatch(k, { rows, dim, vocab, chunk: VOCAB_CHUNK }, { ids, dOut, dTable }, [groupsFor(dim, wg), groupsFor(vocab, VOCAB_CHUNK)]);
}

const SCATTER_ROWS = kernelBindings({
  uniforms: { rows: "u32", dim: "u32" },
  buffers: { index: "read u32", src: "read f32", dst: "read_write f32" },
});

/** dst[index[r], :] = src[r, :] for unique indices (the backward of a row gather; other rows untouched). */
export function scatterRows(ctx: GpuContext, index: GPUBuffer, src: GPUBuffer, dst: GPUBuffer, rows: number, dim: number): void {
  const wg = ctx.tuning.elementwise;
  const k = memoKernel(ctx.tuning, "scatter_rows", SCATTER_ROWS, () =>
    elementwiseMain(wg, "P.rows * P.dim", "  dst[index[i / P.dim] * P.dim + i % P.dim] = src[i];"),
  );
  ctx.dispatch(k, { rows, dim }, { index, src, dst }, launch1d(ctx, rows * dim));
}
