import type { GpuContext } from "../context.ts";
import { kernelBindings, memoKernel } from "../kernel-source.ts";
import { elementwiseMain, launch1d, split2d } from "./grid.ts";
import { rowMain } from "./reduce-wgsl.ts";

/**
 * Fused log-softmax + gather + entropy over logits z [rows, vocab]: per row the taken token's log-prob
 * z[target] - lse and the entropy lse - sum(softmax(z) z). Only two floats per row are kept (lse and
 * E = sum(softmax(z) z)); the backward rebuilds softmax from them and writes dz over the logits in place,
 * so no second vocab-sized tensor exists.
 */

const FWD = kernelBindings({
  uniforms: { rows: "u32", vocab: "u32" },
  buffers: { z: "read f32", targets: "read u32", logprob: "read_write f32", entropy: "read_write f32", stats: "read_write f32" },
});
const BWD = kernelBindings({
  uniforms: { rows: "u32", vocab: "u32" },
  buffers: { z: "read_write f32", targets: "read u32", stats: "read f32", dlogprob: "read f32", dentropy: "read f32" },
});

/** stats: [rows, 2] = (lse, E). */
export function logSoftmaxGatherEntropy(
  ctx: GpuContext,
  logits: GPUBuffer,
  targets: GPUBuffer,
  logprob: GPUBuffer,
  entropy: GPUBuffer,
  stats: GPUBuffer,
  rows: number,
  vocab: number,
): void {
  const t = ctx.tuning.rowThreads;
  const k = memoKernel(ctx.tuning, "logsoftmax_fwd", FWD, () =>
    rowMain(
      t,
      `  let o = row * P.vocab;
  var mx = -3.0e38;
  for (var j = lid; j < P.vocab; j += THREADS) { mx = max(mx, z[o + j]); }
  mx = treeMax(lid, mx);
  var s = 0.0;
  var sz = 0.0;
  for (var j = lid; j < P.vocab; j += THREADS) {
    let e = exp(z[o + j] - mx);
    s += e;
    sz = fma(e, z[o + j] - mx, sz);
  }
  let sum = treeSum(lid, s);
  let sumZ = treeSum(lid, sz);
  if (lid == 0u) {
    let lse = mx + log(sum);
    let E = mx + sumZ / sum;
    logprob[row] = z[o + targets[row]] - lse;
    entropy[row] = lse - E;
    stats[2u * row] = lse;
    stats[2u * row + 1u] = E;
  }`,
    ),
  );
  ctx.dispatch(k, { rows, vocab }, { z: logits, targets, logprob, entropy, stats }, split2d(rows));
}

/** z <- dlogprob (1[k == target] - p_k) - dentropy p_k (z_k - E), in place. */
export function logSoftmaxGatherEntropyBackward(
  ctx: GpuContext,
  logits: GPUBuffer,
  targets: GPUBuffer,
  stats: GPUBuffer,
  dlogprob: GPUBuffer,
  dentropy: GPUBuffer,
  rows: number,
  vocab: number,
): void {
  const wg = ctx.tuning.elementwise;
  const k = memoKernel(ctx.tuning, "logsoftmax_bwd", BWD, () =>
    elementwiseMain(
      wg,
      "P.rows * P.vocab",
      `  let row = i / P.vocab;
  let zk = z[i];
  let p = exp(zk - stats[2u * row]);
  let onehot = select(0.0, 1.0, i % P.vocab == targets[row]);
  z[i] = dlogprob[row] * (onehot - p) - dentropy[row] * p * (zk - stats[2u * row + 1u]);`,
    ),
  );
  ctx.dispatch(k, { rows, vocab }, { z: logits, targets, stats, dlogprob, dentropy }, launch1d(ctx, rows * vocab));
}
