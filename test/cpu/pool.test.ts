/**
 * The CPU worker pool: threads over one shared memory give the same bits as one thread (GEMM split by
 * columns), a kernel failing on a worker surfaces as an error, and a closed pool refuses work.
 * (Node here; test/cpu/cross-runtime.ts runs a 3-thread pool under Node, Deno and Bun.)
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { Rng } from "../../src/model/init.ts";
import { columnRanges } from "../../src/cpu/split.ts";
import { WasmOps } from "../../src/cpu/wasm-ops.ts";
import { CpuPool, type Task } from "../../src/cpu/pool.ts";
import { instantiateCpuCore } from "../../src/cpu/kernels/index.ts";
import { randn } from "../model/helpers.ts";

describe("CPU worker pool", () => {
  let pool: CpuPool;
  beforeAll(async () => {
    pool = await CpuPool.create(3);
  });
  afterAll(() => pool.close());

  it("starts the threads asked for, over a shared memory", () => {
    expect(pool.threads).toBe(3);
    expect(pool.core.memory.buffer).toBeInstanceOf(SharedArrayBuffer);
  });

  it("column ranges tile [0, n) on multiples of 8, fixed by (n, parts)", () => {
    for (const [n, parts] of [
      [1, 3],
      [17, 2],
      [4864, 3],
      [45, 8],
    ]) {
      const r = columnRanges(n, parts);
      expect(r[0][0]).toBe(0);
      expect(r.at(-1)![1]).toBe(n);
      for (let i = 1; i < r.length; i++) expect(r[i][0]).toBe(r[i - 1][1]);
      for (const [j0] of r) expect(j0 % 8).toBe(0);
      expect(columnRanges(n, parts)).toEqual(r);
    }
  });

  it("matmuls on 3 threads are bit-identical to one thread (every form, odd shapes, split by columns or rows)", () => {
    const one = new WasmOps(instantiateCpuCore());
    const three = new WasmOps(pool);
    const rng = new Rng(3);
    for (const [m, k, n] of [
      [2, 300, 700],
      [37, 300, 45],
      [130, 257, 99],
      [64, 64, 1000],
      [301, 70, 64],
    ]) {
      const a = Float32Array.from(randn(rng, m * k));
      const b = Float32Array.from(randn(rng, k * n));
      const bt = Float32Array.from(randn(rng, n * k));
      const at = Float32Array.from(randn(rng, k * m));
      expect(three.matmul(a, b, { m, k, n })).toEqual(one.matmul(a, b, { m, k, n }));
      expect(three.matmulABt(a, bt, { m, k, n })).toEqual(one.matmulABt(a, bt, { m, k, n }));
      expect(three.matmulAtB(at, b, { m, k, n })).toEqual(one.matmulAtB(at, b, { m, k, n }));
    }
  });

  it("every other op on 3 threads (rows, elements, or (batch row, kv head) split) is bit-identical to one thread", () => {
    const one = new WasmOps(instantiateCpuCore());
    const three = new WasmOps(pool);
    const runs = vi.spyOn(pool, "run");
    const rng = new Rng(4);
    const f = (n: number, std = 1) => Float32Array.from(randn(rng, n, std));
    const same = (name: string, a: unknown, b: unknown) => expect(a, name).toEqual(b);
    const [rows, dim] = [1000, 300];
    const x = f(rows * dim);
    const w = f(dim);
    const nb = one.rmsnorm(x, w, { rows, dim, eps: 1e-6 });
    same("rmsnorm", three.rmsnorm(x, w, { rows, dim, eps: 1e-6 }), nb);
    same("rmsnormBackward", three.rmsnormBackward(x, w, nb.rstd, x, { rows, dim }), one.rmsnormBackward(x, w, nb.rstd, x, { rows, dim }));
    const rd = { rows: 600, heads: 4, headDim: 128, theta: 1e4 };
    const xr = f(600 * 512);
    const pos = Array.from({ length: 600 }, (_, i) => i);
    same("rope", three.rope(xr, pos, rd), one.rope(xr, pos, rd));
    same("ropeBackward", three.ropeBackward(xr, pos, rd), one.ropeBackward(xr, pos, rd));
    const g = f(40001, 3);
    const u = f(40001);
    same("swiglu", three.swiglu(g, u), one.swiglu(g, u));
    same("swigluBackward", three.swigluBackward(g, u, u), one.swigluBackward(g, u, u));
    const z = f(50 * 1001, 4);
    const tg = Array.from({ length: 50 }, (_, i) => i * 7);
    const ls = one.logSoftmaxGatherEntropy(z, tg, { rows: 50, vocab: 1001 });
    same("logSoftmaxGatherEntropy", three.logSoftmaxGatherEntropy(z, tg, { rows: 50, vocab: 1001 }), ls);
    const gl = f(50);
    same(
      "logSoftmaxGatherEntropyBackward",
      three.logSoftmaxGatherEntropyBackward(z, tg, ls.lse, ls.entropy, gl, gl, { rows: 50, vocab: 1001 }),
      one.logSoftmaxGatherEntropyBackward(z, tg, ls.lse, ls.entropy, gl, gl, { rows: 50, vocab: 1001 }),
    );
    const d = { batch: 5, seq: 32, heads: 4, kvHeads: 2, headDim: 16 };
    const q = f(5 * 32 * 64);
    const k = f(5 * 32 * 32);
    const v = f(5 * 32 * 32);
    const mask = Array.from({ length: 160 }, (_, i) => (i % 9 === 4 ? 0 : 1));
    const at = one.attention(q, k, v, mask, d);
    same("attention", three.attention(q, k, v, mask, d), at);
    same("attention without probs", three.attention(q, k, v, mask, d, false), one.attention(q, k, v, mask, d, false));
    same("attentionBackward", three.attentionBackward(q, k, v, at.probs, q, d), one.attentionBackward(q, k, v, at.probs, q, d));
    // one sequence: the split is over kv heads
    const d1 = { batch: 1, seq: 64, heads: 6, kvHeads: 3, headDim: 16 };
    const [q1, k1, v1] = [f(64 * 96), f(64 * 48), f(64 * 48)];
    const m1 = new Array(64).fill(1);
    const a1 = one.attention(q1, k1, v1, m1, d1);
    same("attention B=1", three.attention(q1, k1, v1, m1, d1), a1);
    same(
      "attentionBackward B=1",
      three.attentionBackward(q1, k1, v1, a1.probs, q1, d1),
      one.attentionBackward(q1, k1, v1, a1.probs, q1, d1),
    );
    const [kc, vc] = [f(1000 * 48), f(1000 * 48)];
    same(
      "attentionDecode",
      three.attentionDecode(q1.subarray(0, 96), kc, vc, 1000, d1),
      one.attentionDecode(q1.subarray(0, 96), kc, vc, 1000, d1),
    );
    const p1 = f(40001);
    const p3 = p1.slice();
    const s1 = { step: 0, m: new Float32Array(40001), v: new Float32Array(40001) };
    const s3 = { step: 0, m: new Float32Array(40001), v: new Float32Array(40001) };
    const o = { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01, maxGradNorm: 1 };
    one.adamwStep(p1, g, s1, o);
    three.adamwStep(p3, g, s3, o);
    same("adamw", [p3, s3], [p1, s1]);
    // every op above was split over the 3 threads
    expect(runs.mock.calls).toHaveLength(15);
    for (const [tasks] of runs.mock.calls) expect(tasks).toHaveLength(3);
    runs.mockRestore();
  });

  it("each split's tasks, run one after another in any order, give one thread's bits: no task writes outside its range or reads another's", async () => {
    // Real threads mostly finish the calling thread's task first; a loaded machine can run them in any order.
    const single = await CpuPool.create(1);
    const inOrder = (order: (tasks: Task[]) => Task[]): CpuPool => {
      const pool = Object.create(CpuPool.prototype) as CpuPool;
      Object.defineProperty(pool, "core", { value: single.core });
      Object.defineProperty(pool, "threads", { get: () => 3 });
      Object.defineProperty(pool, "run", {
        value: (tasks: Task[]) => {
          for (const t of order(tasks)) (single.core.exports[t.name] as unknown as (...a: number[]) => void)(...t.args);
        },
      });
      return pool;
    };
    // byte comparisons: toEqual's element walk would take most of the test's time
    const bytes = (x: ArrayBufferView) => Buffer.from(x.buffer, x.byteOffset, x.byteLength);
    type Result = ArrayBufferView | Record<string, ArrayBufferView>;
    const sameBits = (a: Result, b: Result) => {
      const [xs, ys] = [a, b].map((v) => (ArrayBuffer.isView(v) ? { v } : v) as Record<string, ArrayBufferView>);
      expect(Object.keys(xs)).toEqual(Object.keys(ys));
      for (const key of Object.keys(xs)) expect(bytes(xs[key]).equals(bytes(ys[key])), key).toBe(true);
    };
    try {
      const one = new WasmOps(instantiateCpuCore());
      // the workers' tasks first, the calling thread's last
      for (const order of [(t: Task[]) => [...t].reverse()]) {
        const ops = new WasmOps(inOrder(order));
        const rng = new Rng(5);
        const f = (n: number, std = 1) => Float32Array.from(randn(rng, n, std));
        for (const [m, k, n] of [
          [130, 257, 99],
          [301, 70, 64],
          [96, 64, 513],
        ]) {
          const [a, b, bt, at] = [f(m * k), f(k * n), f(n * k), f(k * m)];
          sameBits(ops.matmul(a, b, { m, k, n }), one.matmul(a, b, { m, k, n }));
          sameBits(ops.matmulABt(a, bt, { m, k, n }), one.matmulABt(a, bt, { m, k, n }));
          sameBits(ops.matmulAtB(at, b, { m, k, n }), one.matmulAtB(at, b, { m, k, n }));
        }
        const [rows, dim] = [1001, 128];
        const [x, w] = [f(rows * dim), f(dim)];
        const nb = one.rmsnorm(x, w, { rows, dim, eps: 1e-6 });
        sameBits(ops.rmsnorm(x, w, { rows, dim, eps: 1e-6 }), nb);
        sameBits(ops.rmsnormBackward(x, w, nb.rstd, x, { rows, dim }), one.rmsnormBackward(x, w, nb.rstd, x, { rows, dim }));
        const d = { batch: 3, seq: 150, heads: 4, kvHeads: 2, headDim: 16 };
        const [q, kk, v] = [f(3 * 150 * 64), f(3 * 150 * 32), f(3 * 150 * 32)];
        const mask = Array.from({ length: 450 }, (_, i) => (i % 9 === 4 ? 0 : 1));
        const att = one.attention(q, kk, v, mask, d);
        sameBits(ops.attention(q, kk, v, mask, d), att);
        sameBits(ops.attentionBackward(q, kk, v, att.probs, q, d), one.attentionBackward(q, kk, v, att.probs, q, d));
        const z = f(300 * 513, 4);
        const tg = Array.from({ length: 300 }, (_, i) => (i * 7) % 513);
        const ls = one.logSoftmaxGatherEntropy(z, tg, { rows: 300, vocab: 513 });
        sameBits(ops.logSoftmaxGatherEntropy(z, tg, { rows: 300, vocab: 513 }), ls);
        const gl = f(300);
        sameBits(
          ops.logSoftmaxGatherEntropyBackward(z, tg, ls.lse, ls.entropy, gl, gl, { rows: 300, vocab: 513 }),
          one.logSoftmaxGatherEntropyBackward(z, tg, ls.lse, ls.entropy, gl, gl, { rows: 300, vocab: 513 }),
        );
        const [g, u] = [f(70001, 3), f(70001)];
        sameBits(ops.swiglu(g, u), one.swiglu(g, u));
        sameBits(ops.swigluBackward(g, u, u), one.swigluBackward(g, u, u));
        const pos = Array.from({ length: 1001 }, (_, i) => i % 77);
        const rd = { rows: 1001, heads: 2, headDim: 64, theta: 1e4 };
        const xr = f(1001 * 128);
        sameBits(ops.rope(xr, pos, rd), one.rope(xr, pos, rd));
      }
    } finally {
      single.close();
    }
  });

  it("a kernel that traps on a worker throws on the calling thread; the pool still works after", () => {
    const core = pool.core;
    core.begin();
    const scratch = core.alloc(core.exports.gemmScratchBytes());
    const outside = 2 ** 31; // past the end of memory: the worker's gemm traps
    expect(() =>
      pool.run([
        { name: "gemm", args: [0, 0, 0, 0, 4, 4, 16, 0, 0, scratch] },
        { name: "gemm", args: [0, outside, outside, outside, 4, 4, 16, 0, 16, scratch] },
      ]),
    ).toThrow(/worker thread/);
    const y = new WasmOps(pool).matmul(new Float32Array([1, 2]), new Float32Array([3, 4]), { m: 1, k: 2, n: 1 });
    expect(Array.from(y)).toEqual([11]);
  });

  it("a kernel that traps on the calling thread throws only once the workers are done", () => {
    const core = pool.core;
    core.begin();
    const n = 1024;
    const ones = core.alloc(n * n * 4);
    core.view(Float32Array, ones, n * n).fill(1);
    const c = core.alloc(n * n * 4);
    const out = core.view(Float32Array, c, n * n);
    out.fill(0);
    const scratch = [0, 1, 2].map(() => core.alloc(core.exports.gemmScratchBytes()));
    const outside = 2 ** 31; // past the end of memory: the calling thread's gemm traps at once
    expect(() =>
      pool.run([
        { name: "gemm", args: [0, outside, outside, outside, 4, 4, 16, 0, 16, scratch[0]] },
        { name: "gemm", args: [0, ones, ones, c, n, n, n, 0, n / 2, scratch[1]] },
        { name: "gemm", args: [0, ones, ones, c, n, n, n, n / 2, n, scratch[2]] },
      ]),
    ).toThrow();
    // the workers' last elements are written when run() gives up (before the fix it returned while they computed)
    const last = [out[n * n - n / 2 - 1], out[n * n - 1]];
    expect(last).toEqual([n, n]);
    expect(out.every((x) => x === n)).toBe(true);
  });

  it("a closed pool refuses work", async () => {
    const p = await CpuPool.create(2);
    p.close();
    expect(() => p.run([{ name: "gemm", args: [] }])).toThrow(/closed/);
  });
});
