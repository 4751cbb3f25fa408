/**
 * The KV-cache and few-row matmul kernels against plain-TS references on random inputs (shapes that are not multiples of
 * the workgroup sizes, several key tiles, head dims above the thread count), and KV-cached decoding
 * against full forwards: the logits of every step equal those of the whole sequence run through the
 * CPU reference and through the GPU's uncached forward.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GpuContext } from "../../src/gpu/context.ts";
import { GpuDecoder, leftPaddedBatch } from "../../src/gpu/decode.ts";
import { attentionDecode, kvCacheWrite } from "../../src/gpu/kernels/kv-cache.ts";
import { matmulRows } from "../../src/gpu/kernels/matmul-rows.ts";
import { GpuModel } from "../../src/gpu/model.ts";
import type { ModelConfig } from "../../src/model/config.ts";
import { Rng, initParams } from "../../src/model/init.ts";
import { forward } from "../../src/model/reference/model.ts";
import * as ops from "../../src/model/reference/ops.ts";
import { maxRelError, noGpu, randn } from "./gpu-env.ts";

/** cache[b, slot0 + t, :] = src[b, t, :] on a copy of `cache`. */
function refWrite(src: Float32Array, cache: Float32Array, B: number, rows: number, S: number, slot0: number, width: number): Float32Array {
  const out = cache.slice();
  for (let b = 0; b < B; b++)
    for (let t = 0; t < rows; t++) out.set(src.subarray((b * rows + t) * width, (b * rows + t + 1) * width), (b * S + slot0 + t) * width);
  return out;
}

/** Decode attention by the CPU reference: per sequence, the visible slots gathered and attended in full. */
function refDecode(
  q: Float32Array,
  k: Float32Array,
  v: Float32Array,
  mask: Uint32Array,
  B: number,
  S: number,
  n: number,
  H: number,
  KV: number,
  hd: number,
): Float32Array {
  const w = KV * hd;
  const out = new Float32Array(B * H * hd);
  for (let b = 0; b < B; b++) {
    const seen = [...Array(n).keys()].filter((j) => j === n - 1 || mask[b * S + j] !== 0);
    const kc = new Float32Array(seen.length * w),
      vc = new Float32Array(seen.length * w);
    seen.forEach((j, r) => {
      kc.set(k.subarray((b * S + j) * w, (b * S + j + 1) * w), r * w);
      vc.set(v.subarray((b * S + j) * w, (b * S + j + 1) * w), r * w);
    });
    out.set(
      ops.attentionDecode(q.subarray(b * H * hd, (b + 1) * H * hd), kc, vc, seen.length, { heads: H, kvHeads: KV, headDim: hd }),
      b * H * hd,
    );
  }
  return out;
}

describe.skipIf(noGpu)("KV-cache kernels and cached decoding", { timeout: 240_000 }, () => {
  let ctx: GpuContext;
  const rng = new Rng(99);
  beforeAll(async () => {
    ctx = await GpuContext.create();
  });
  afterAll(() => ctx?.destroy());

  it.each([
    [1, 1, 1],
    [2, 37, 65],
    [5, 300, 67],
    [7, 130, 264],
  ])("few-row matmul M=%i K=%i N=%i, B plain and transposed, overwrite and accumulate", async (M, K, N) => {
    const a = randn(rng, M * K);
    const b = randn(rng, K * N);
    const c0 = randn(rng, M * N);
    const want = ops.matmul(a, b, { m: M, k: K, n: N });
    const bT = new Float32Array(K * N);
    for (let k = 0; k < K; k++) for (let n = 0; n < N; n++) bT[n * K + k] = b[k * N + n];
    for (const transB of [false, true]) {
      const A = ctx.upload(a),
        B = ctx.upload(transB ? bT : b),
        C = ctx.upload(c0);
      matmulRows(ctx, A, B, C, { M, N, K, transB });
      expect(maxRelError(await ctx.read(C), want)).toBeLessThan(2e-5);
      ctx.write(C, c0);
      matmulRows(ctx, A, B, C, { M, N, K, transB, accumulate: true });
      expect(maxRelError(await ctx.read(C), ops.add(c0, want))).toBeLessThan(2e-5);
    }
  });

  it.each([
    [2, 5, 9, 0, 6],
    [3, 1, 13, 11, 20],
  ])("kv cache write B=%i rows=%i S=%i slot0=%i width=%i", async (B, rows, S, slot0, width) => {
    const src = randn(rng, B * rows * width);
    const cache = randn(rng, B * S * width);
    const C = ctx.upload(cache);
    kvCacheWrite(ctx, ctx.upload(src), C, B, rows, S, slot0, width);
    expect(await ctx.read(C)).toEqual(refWrite(src, cache, B, rows, S, slot0, width));
  });

  it.each([
    // B, S, n, H, KV, hd, threads (0: the device's)
    [2, 7, 5, 2, 1, 4, 0],
    [3, 90, 70, 4, 2, 8, 0],
    [1, 40, 40, 3, 3, 72, 0],
    [2, 33, 29, 6, 2, 10, 8],
  ])("decode attention B=%i S=%i n=%i H=%i KV=%i hd=%i threads=%i with padding and holes", async (B, S, n, H, KV, hd, threads) => {
    const c = threads > 0 ? new GpuContext(ctx.device, undefined, { ...ctx.tuning, attentionQueries: threads }) : ctx;
    const q = randn(rng, B * H * hd);
    const k = randn(rng, B * S * KV * hd);
    const v = randn(rng, B * S * KV * hd);
    const mask = new Uint32Array(B * S).fill(1);
    mask.fill(0, 0, Math.min(3, n - 1)); // left padding of row 0
    mask[(B - 1) * S + Math.floor(n / 2)] = 0; // a hole in the last row
    mask[(B - 1) * S + n - 1] = 0; // the query's own slot is visible regardless
    const out = c.alloc(B * H * hd);
    attentionDecode(c, c.upload(q), c.upload(k), c.upload(v), c.upload(mask), out, {
      batch: B,
      slots: S,
      filled: n,
      heads: H,
      kvHeads: KV,
      headDim: hd,
    });
    expect(maxRelError(await c.read(out), refDecode(q, k, v, mask, B, S, n, H, KV, hd))).toBeLessThan(1e-5);
  });

  it("cached decoding gives the logits of full forwards (CPU reference and uncached GPU) at every step", async () => {
    const config: ModelConfig = {
      vocab_size: 50,
      d_model: 48,
      n_layers: 2,
      n_heads: 4,
      n_kv_heads: 2,
      d_ff: 80,
      max_seq_len: 24,
      rope_theta: 10000,
      norm_eps: 1e-5,
      tie_embeddings: false,
    };
    const params = initParams(config, 5);
    const model = new GpuModel(ctx, config, params, false);
    const prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11]];
    const feeds = [
      [12, 13, 14, 15],
      [16, 17, 18, 19],
      [20, 21, 22, 23],
    ];
    const V = config.vocab_size;
    const decoder = new GpuDecoder(model, prompts, 7 + 4);
    /** Last-position logits of each sequence run whole through the CPU reference. */
    const cpuLast = (seqs: number[][]): Float32Array => {
      const out = new Float32Array(seqs.length * V);
      seqs.forEach((s, b) => {
        const L = s.length;
        const r = forward(config, params, {
          n: 1,
          inputIds: Int32Array.from(s),
          attentionMask: new Int32Array(L).fill(1),
          positionIds: Int32Array.from({ length: L }, (_, i) => i),
        });
        out.set(r.logits.subarray((L - 1) * V, L * V), b * V);
      });
      return out;
    };
    /** The same through the GPU's uncached forward, left-padded like the old generation path. */
    const gpuLast = async (seqs: number[][]): Promise<Float32Array> => {
      const { shape, inputs } = leftPaddedBatch(seqs);
      const ws = model.forward(shape, inputs);
      return ctx.read(ws.logits, shape.B * V);
    };
    const seqs = prompts.map((p) => [...p]);
    const got = [await decoder.prefill()];
    const wantCpu = [cpuLast(seqs)];
    const wantGpu = [await gpuLast(seqs)];
    for (let t = 0; t < 4; t++) {
      // the last sequence stops after two tokens: its row is skipped and stays zero
      const tokens = feeds.map((f, b) => (b === 2 && t >= 2 ? null : f[t]));
      got.push(await decoder.step(tokens));
      seqs.forEach((s, b) => tokens[b] !== null && s.push(tokens[b]!));
      wantCpu.push(cpuLast(seqs));
      wantGpu.push(await gpuLast(seqs));
      tokens.forEach((tok, b) => {
        if (tok === null) wantCpu[t + 1].fill(0, b * V, (b + 1) * V), wantGpu[t + 1].fill(0, b * V, (b + 1) * V);
      });
    }
    expect(decoder.length).toBe(11);
    got.forEach((g, i) => {
      expect(maxRelError(g, wantCpu[i])).toBeLessThan(1e-4);
      expect(maxRelError(g, wantGpu[i])).toBeLessThan(1e-4);
    });
    expect(got[4].subarray(0, V).some((x) => x !== 0)).toBe(true);
    await expect(decoder.step([1, 1, 1])).rejects.toThrow(/slots are full/);
    decoder.destroy();
    model.destroy();
  });

  it("dropping sequences from the cache leaves the others' logits bit for bit", async () => {
    const config: ModelConfig = {
      vocab_size: 30,
      d_model: 32,
      n_layers: 2,
      n_heads: 4,
      n_kv_heads: 2,
      d_ff: 40,
      max_seq_len: 16,
      rope_theta: 10000,
      norm_eps: 1e-5,
      tie_embeddings: true,
    };
    const model = new GpuModel(ctx, config, initParams(config, 9), false);
    const prompts = [[1, 2], [3, 4, 5, 6], [7, 8, 9], [10]];
    const V = config.vocab_size;
    const all = new GpuDecoder(model, prompts, 8);
    const kept = new GpuDecoder(model, prompts, 8);
    await all.prefill();
    await kept.prefill();
    await all.step([11, 12, 13, 14]);
    await kept.step([11, 12, 13, 14]);
    kept.keep([1, 3]);
    expect(kept.batch).toBe(2);
    for (const t of [15, 16, 17]) {
      const full = await all.step([t, t, t, t]);
      const part = await kept.step([t, t]);
      expect(part.subarray(0, V)).toEqual(full.subarray(V, 2 * V));
      expect(part.subarray(V, 2 * V)).toEqual(full.subarray(3 * V, 4 * V));
    }
    expect(() => kept.keep([1, 0])).toThrow(/ascending/);
    all.destroy();
    kept.destroy();
    model.destroy();
  });
});
