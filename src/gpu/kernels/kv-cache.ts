import type { GpuContext } from "../context.ts";
import { kernelBindings, memoKernel } from "../kernel-source.ts";
import type { GpuTuning } from "../tuning.ts";
import { elementwiseMain, launch1d } from "./grid.ts";

/**
 * Kernels of KV-cached decoding. The cache of one layer holds K (after RoPE) or V as [B, S, KV*hd]: B
 * sequences, S slots each. Sequences of a batch share the slot axis (prompts left-padded to the longest),
 * so one decode step writes slot n-1 of every row and attends over slots 0..n-1; a [B, S] u32 mask marks
 * the real slots, with the visibility rule of src/model/config.ts (slot j visible to the query in slot i
 * iff j == i or (j < i and mask[j] == 1)).
 */

const WRITE = kernelBindings({
  uniforms: { rows: "u32", batch: "u32", slots: "u32", slot0: "u32", width: "u32" },
  buffers: { src: "read f32", cache: "read_write f32" },
});

/** cache[b, slot0 + t, :] = src[b * rows + t, :] for t < rows: the prefill's rows (rows = T) or one decoded row (rows = 1). */
export function kvCacheWrite(
  ctx: GpuContext,
  src: GPUBuffer,
  cache: GPUBuffer,
  batch: number,
  rows: number,
  slots: number,
  slot0: number,
  width: number,
): void {
  const wg = ctx.tuning.elementwise;
  const k = memoKernel(ctx.tuning, "kv_cache_write", WRITE, () =>
    elementwiseMain(
      wg,
      "P.batch * P.rows * P.width",
      `  let e = id % P.width;
  let bt = id / P.width;
  let t = bt % P.rows;
  let b = bt / P.rows;
  cache[(b * P.slots + P.slot0 + t) * P.width + e] = src[id];`,
      "id",
    ),
  );
  ctx.dispatch(k, { rows, batch, slots, slot0, width }, { src, cache }, launch1d(ctx, batch * rows * width));
}

export interface DecodeAttentionShape {
  batch: number;
  /** Slots per sequence in the cache (its allocated length). */
  slots: number;
  /** Filled slots; the query is the token in slot filled - 1. */
  filled: number;
  heads: number;
  kvHeads: number;
  headDim: number;
}

const DECODE = kernelBindings({
  uniforms: { S: "u32", n: "u32", H: "u32", KV: "u32", scale: "f32" },
  buffers: { q: "read f32", kc: "read f32", vc: "read f32", mask: "read u32", out: "read_write f32" },
});

/** Threads of the decode attention: one key each while scoring a tile, head dims split among them while accumulating. */
export function decodeThreads(t: GpuTuning): number {
  return t.attentionQueries;
}

/**
 * One query per (sequence, head) against the cache: a workgroup per (head, sequence). Each tile of W
 * keys is scored in parallel (one thread per key, q staged in workgroup memory), then every thread
 * folds the tile's scores in order into an online softmax for the head dims it owns. No [S] score
 * buffer exists, so any cache length works. q/out: [B, H*hd]; kCache/vCache: [B, S, KV*hd]; mask [B, S].
 */
export function attentionDecode(
  ctx: GpuContext,
  q: GPUBuffer,
  kCache: GPUBuffer,
  vCache: GPUBuffer,
  mask: GPUBuffer,
  out: GPUBuffer,
  s: DecodeAttentionShape,
): void {
  const W = decodeThreads(ctx.tuning);
  const HD = s.headDim;
  const DPT = Math.ceil(HD / W);
  const kernel = memoKernel(
    ctx.tuning,
    `attn_decode_${HD}`,
    DECODE,
    () => `
const W = ${W}u; const HD = ${HD}u; const DPT = ${DPT}u;
var<workgroup> qs: array<f32, ${HD}>;
var<workgroup> sc: array<f32, ${W}>;
var<workgroup> vis: array<u32, ${W}>;
@compute @workgroup_size(${W})
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let h = wg.x; let b = wg.y;
  let kvh = h / (P.H / P.KV);
  let qo = (b * P.H + h) * HD;
  for (var d = lid; d < HD; d += W) { qs[d] = q[qo + d]; }
  workgroupBarrier();
  let i = P.n - 1u;
  var m = -3.0e38;
  var l = 0.0;
  var acc: array<f32, ${DPT}>;
  for (var j0 = 0u; j0 < P.n; j0 += W) {
    let j = j0 + lid;
    var seen = 0u;
    var score = 0.0;
    if (j < P.n && (j == i || mask[b * P.S + j] != 0u)) {
      let ko = ((b * P.S + j) * P.KV + kvh) * HD;
      var dot = 0.0;
      for (var d = 0u; d < HD; d++) { dot = fma(qs[d], kc[ko + d], dot); }
      score = dot * P.scale;
      seen = 1u;
    }
    sc[lid] = score;
    vis[lid] = seen;
    workgroupBarrier();
    let jEnd = min(W, P.n - j0);
    for (var jj = 0u; jj < jEnd; jj++) {
      if (vis[jj] == 0u) { continue; }
      let sj = sc[jj];
      let mNew = max(m, sj);
      let corr = exp(m - mNew);
      let p = exp(sj - mNew);
      l = l * corr + p;
      let vo = ((b * P.S + j0 + jj) * P.KV + kvh) * HD;
      for (var c = 0u; c < DPT; c++) {
        let d = lid + c * W;
        if (d < HD) { acc[c] = fma(p, vc[vo + d], acc[c] * corr); }
      }
      m = mNew;
    }
    workgroupBarrier();
  }
  for (var c = 0u; c < DPT; c++) {
    let d = lid + c * W;
    if (d < HD) { out[qo + d] = acc[c] / l; }
  }
}
`,
  );
  ctx.dispatch(
    kernel,
    { S: s.slots, n: s.filled, H: s.heads, KV: s.kvHeads, scale: 1 / Math.sqrt(s.headDim) },
    { q, kc: kCache, vc: vCache, mask, out },
    [s.heads, s.batch],
  );
}
