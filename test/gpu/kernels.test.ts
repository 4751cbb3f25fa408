import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GpuContext } from "../../src/gpu/context.ts";
import { matmul } from "../../src/gpu/kernels/matmul.ts";
import { embedding, embeddingBackward, scatterRows } from "../../src/gpu/kernels/embedding.ts";
import { rmsnorm, rmsnormBackwardInput, rmsnormBackwardWeight } from "../../src/gpu/kernels/rmsnorm.ts";
import { rope, ropeTable } from "../../src/gpu/kernels/rope.ts";
import { attention, attentionBackward } from "../../src/gpu/kernels/attention.ts";
import { swiglu, swigluBackward } from "../../src/gpu/kernels/swiglu.ts";
import { logSoftmaxGatherEntropy, logSoftmaxGatherEntropyBackward } from "../../src/gpu/kernels/logsoftmax.ts";
import { columnSums, sumSquares, SUMSQ_GROUPS } from "../../src/gpu/kernels/reduce.ts";
import { adamw, adamwScalars } from "../../src/gpu/kernels/adamw.ts";
import { adamwStep } from "../../src/model/reference/optim.ts";
import * as ops from "../../src/model/reference/ops.ts";
import { Rng } from "../../src/model/init.ts";
import { maxRelError, noGpu, randInt, randn } from "./gpu-env.ts";

const TOL = 2e-5;

function transpose(a: Float32Array, rows: number, cols: number): Float32Array {
  const t = new Float32Array(a.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) t[c * rows + r] = a[r * cols + c];
  return t;
}

describe.skipIf(noGpu)("WGSL kernels vs the CPU reference", { timeout: 180_000 }, () => {
  let ctx: GpuContext;
  const rng = new Rng(1234);
  beforeAll(async () => {
    ctx = await GpuContext.create();
  });
  afterAll(() => ctx?.destroy());

  it.each([
    [1, 1, 1],
    [37, 53, 29],
    [64, 64, 64],
    [70, 130, 65],
  ])("matmul M=%i K=%i N=%i in all transpose variants, overwrite and accumulate", async (M, K, N) => {
    const a = randn(rng, M * K);
    const b = randn(rng, K * N);
    const c0 = randn(rng, M * N);
    const want = ops.matmul(a, b, { m: M, k: K, n: N });
    for (const transA of [false, true]) {
      for (const transB of [false, true]) {
        const A = ctx.upload(transA ? transpose(a, M, K) : a);
        const B = ctx.upload(transB ? transpose(b, K, N) : b);
        const C = ctx.upload(c0);
        matmul(ctx, A, B, C, { M, N, K, transA, transB });
        expect(maxRelError(await ctx.read(C), want)).toBeLessThan(TOL);
        ctx.write(C, c0);
        matmul(ctx, A, B, C, { M, N, K, transA, transB, accumulate: true });
        expect(maxRelError(await ctx.read(C), ops.add(c0, want))).toBeLessThan(TOL);
      }
    }
  });

  it("embedding gather and scatter-add (repeated ids), row scatter", async () => {
    const vocab = 45;
    const dim = 19;
    const rows = 77;
    const ids = randInt(rng, rows, vocab);
    ids[3] = ids[5] = ids[9] = 7;
    const table = randn(rng, vocab * dim);
    const out = ctx.alloc(rows * dim);
    embedding(ctx, ctx.upload(ids), ctx.upload(table), out, rows, dim);
    expect(await ctx.read(out)).toEqual(ops.embedding(ids, table, { vocab, dim }));
    const dy = randn(rng, rows * dim);
    const dTable = ctx.upload(table);
    embeddingBackward(ctx, ctx.upload(ids), ctx.upload(dy), dTable, rows, dim, vocab);
    expect(maxRelError(await ctx.read(dTable), ops.add(table, ops.embeddingBackward(ids, dy, { vocab, dim })))).toBeLessThan(TOL);
    const index = new Uint32Array([4, 0, 2]);
    const dst = ctx.alloc(5 * dim);
    scatterRows(ctx, ctx.upload(index), ctx.upload(dy.subarray(0, 3 * dim)), dst, 3, dim);
    const got = await ctx.read(dst);
    expect(got.subarray(4 * dim, 5 * dim)).toEqual(dy.subarray(0, dim));
    expect(got.subarray(1 * dim, 2 * dim)).toEqual(new Float32Array(dim));
  });

  it.each([
    [5, 7],
    [33, 300],
  ])("rmsnorm forward and backward, rows=%i dim=%i", async (rows, dim) => {
    const eps = 1e-5;
    const x = randn(rng, rows * dim, 2);
    const w = randn(rng, dim);
    const dy = randn(rng, rows * dim);
    const ref = ops.rmsnorm(x, w, { rows, dim, eps });
    const refB = ops.rmsnormBackward(x, w, ref.rstd, dy, { rows, dim });
    const [X, W, Y, R, DY] = [ctx.upload(x), ctx.upload(w), ctx.alloc(rows * dim), ctx.alloc(rows), ctx.upload(dy)];
    rmsnorm(ctx, X, W, Y, R, rows, dim, eps);
    expect(maxRelError(await ctx.read(Y), ref.y)).toBeLessThan(TOL);
    expect(maxRelError(await ctx.read(R), ref.rstd)).toBeLessThan(TOL);
    const prior = randn(rng, rows * dim);
    const DX = ctx.upload(prior);
    rmsnormBackwardInput(ctx, X, W, R, DY, DX, rows, dim, true);
    expect(maxRelError(await ctx.read(DX), ops.add(prior, refB.dx))).toBeLessThan(TOL);
    rmsnormBackwardInput(ctx, X, W, R, DY, DX, rows, dim, false);
    expect(maxRelError(await ctx.read(DX), refB.dx)).toBeLessThan(TOL);
    const DW = ctx.alloc(dim);
    rmsnormBackwardWeight(ctx, X, R, DY, DW, rows, dim);
    expect(maxRelError(await ctx.read(DW), refB.dw)).toBeLessThan(TOL);
  });

  it("rope forward and its inverse at large positions", async () => {
    const rows = 23;
    const heads = 3;
    const headDim = 10;
    const theta = 10000;
    const maxPos = 600;
    const x = randn(rng, rows * heads * headDim);
    const pos = randInt(rng, rows, maxPos);
    const dims = { rows, heads, headDim, theta };
    const table = ctx.upload(ropeTable(maxPos, headDim, theta));
    const X = ctx.upload(x);
    rope(ctx, X, ctx.upload(pos), table, maxPos, rows, heads, headDim, false);
    expect(maxRelError(await ctx.read(X), ops.rope(x, pos, dims))).toBeLessThan(TOL);
    ctx.write(X, x);
    rope(ctx, X, ctx.upload(pos), table, maxPos, rows, heads, headDim, true);
    expect(maxRelError(await ctx.read(X), ops.ropeBackward(x, pos, dims))).toBeLessThan(TOL);
  });

  it.each([
    [2, 5, 2, 1, 4],
    [2, 70, 4, 2, 8],
    [1, 33, 3, 3, 16],
  ])("causal GQA attention forward and backward B=%i T=%i H=%i KV=%i hd=%i with padding", async (B, T, H, KV, hd) => {
    const dims = { batch: B, seq: T, heads: H, kvHeads: KV, headDim: hd };
    const q = randn(rng, B * T * H * hd);
    const k = randn(rng, B * T * KV * hd);
    const v = randn(rng, B * T * KV * hd);
    const mask = new Uint32Array(B * T).fill(1);
    // left padding in row 0, right padding in the last row, a hole in the middle
    mask[0] = mask[1] = 0;
    mask[B * T - 1] = 0;
    mask[Math.floor(T / 2)] = 0;
    const ref = ops.attention(q, k, v, mask, dims);
    const dout = randn(rng, q.length);
    const refB = ops.attentionBackward(q, k, v, ref.probs, dout, dims);
    const bufs = {
      q: ctx.upload(q),
      k: ctx.upload(k),
      v: ctx.upload(v),
      mask: ctx.upload(mask),
      out: ctx.alloc(q.length),
      lse: ctx.alloc(B * H * T),
      dout: ctx.upload(dout),
      dq: ctx.alloc(q.length),
      dk: ctx.alloc(k.length),
      dv: ctx.alloc(v.length),
      D: ctx.alloc(B * H * T),
    };
    attention(ctx, bufs.q, bufs.k, bufs.v, bufs.mask, bufs.out, bufs.lse, dims);
    expect(maxRelError(await ctx.read(bufs.out), ref.out)).toBeLessThan(1e-5);
    attentionBackward(ctx, bufs, dims);
    expect(maxRelError(await ctx.read(bufs.dq), refB.dq)).toBeLessThan(1e-4);
    expect(maxRelError(await ctx.read(bufs.dk), refB.dk)).toBeLessThan(1e-4);
    expect(maxRelError(await ctx.read(bufs.dv), refB.dv)).toBeLessThan(1e-4);
  });

  it("swiglu forward and backward", async () => {
    const n = 1001;
    const g = randn(rng, n, 3);
    const u = randn(rng, n);
    const dy = randn(rng, n);
    const [G, U, Y, DY, DG, DU] = [ctx.upload(g), ctx.upload(u), ctx.alloc(n), ctx.upload(dy), ctx.alloc(n), ctx.alloc(n)];
    swiglu(ctx, G, U, Y, n);
    expect(maxRelError(await ctx.read(Y), ops.swiglu(g, u))).toBeLessThan(TOL);
    swigluBackward(ctx, G, U, DY, DG, DU, n);
    const ref = ops.swigluBackward(g, u, dy);
    expect(maxRelError(await ctx.read(DG), ref.dgate)).toBeLessThan(TOL);
    expect(maxRelError(await ctx.read(DU), ref.dup)).toBeLessThan(TOL);
  });

  it.each([
    [3, 5],
    [17, 300],
  ])("fused log-softmax/gather/entropy forward and in-place backward rows=%i vocab=%i", async (rows, vocab) => {
    const z = randn(rng, rows * vocab, 4);
    const tg = randInt(rng, rows, vocab);
    const ref = ops.logSoftmaxGatherEntropy(z, tg, { rows, vocab });
    const Z = ctx.upload(z);
    const [TG, LP, H, S] = [ctx.upload(tg), ctx.alloc(rows), ctx.alloc(rows), ctx.alloc(2 * rows)];
    logSoftmaxGatherEntropy(ctx, Z, TG, LP, H, S, rows, vocab);
    expect(maxRelError(await ctx.read(LP), ref.logprob)).toBeLessThan(1e-5);
    expect(maxRelError(await ctx.read(H), ref.entropy)).toBeLessThan(1e-5);
    const gl = randn(rng, rows);
    const ge = randn(rng, rows);
    logSoftmaxGatherEntropyBackward(ctx, Z, TG, S, ctx.upload(gl), ctx.upload(ge), rows, vocab);
    const want = ops.logSoftmaxGatherEntropyBackward(z, tg, ref.lse, ref.entropy, gl, ge, { rows, vocab });
    expect(maxRelError(await ctx.read(Z), want)).toBeLessThan(1e-5);
  });

  it("column sums and sum of squares", async () => {
    const rows = 1234;
    const cols = 3;
    const x = randn(rng, rows * cols);
    const out = ctx.alloc(cols + 1);
    columnSums(ctx, ctx.upload(x), out, rows, cols, 1);
    const got = await ctx.read(out);
    for (let c = 0; c < cols; c++) {
      let s = 0;
      for (let r = 0; r < rows; r++) s += x[r * cols + c];
      expect(got[c + 1]).toBeCloseTo(s, 3);
    }
    const partials = ctx.alloc(2 * SUMSQ_GROUPS);
    sumSquares(ctx, ctx.upload(x), x.length, partials, 1);
    const p = await ctx.read(partials);
    let ss = 0;
    for (const v of x) ss += v * v;
    expect(p.subarray(SUMSQ_GROUPS).reduce((a, b) => a + b, 0)).toBeCloseTo(ss, 2);
    expect(p.subarray(0, SUMSQ_GROUPS).every((v) => v === 0)).toBe(true);
  });

  it("fused AdamW with gradient scaling matches the reference optimizer", async () => {
    const n = 513;
    const p = randn(rng, n);
    const g = randn(rng, n);
    const m = randn(rng, n, 0.1);
    const v = randn(rng, n, 0.1).map(Math.abs);
    const o = { lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.1, maxGradNorm: 1 };
    const scale = 0.5;
    const [P, G, M, V] = [ctx.upload(p), ctx.upload(g), ctx.upload(m), ctx.upload(v)];
    adamw(ctx, P, G, M, V, n, adamwScalars(o, 3, scale));
    const state = { step: 2, m: m.slice(), v: v.slice() };
    const want = p.slice();
    adamwStep(
      want,
      g.map((x) => x * scale),
      state,
      o,
    );
    expect(maxRelError(await ctx.read(P), want)).toBeLessThan(1e-5);
    expect(maxRelError(await ctx.read(M), state.m)).toBeLessThan(1e-6);
    expect(maxRelError(await ctx.read(V), state.v)).toBeLessThan(1e-6);
  });
});
