/**
 * The CPU worker pool: threads over one shared memory give the same bits as one thread (GEMM split by
 * columns), a kernel failing on a worker surfaces as an error, and a closed pool refuses work.
 * (Node here; test/wasm/cpu-cross-runtime.ts runs a 3-thread pool under Node, Deno and Bun.)
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Rng } from "../../src/model/init.ts";
import { columnRanges, wasmOps } from "../../src/model/wasm-ops.ts";
import { CpuPool, instantiateCpuCore } from "../../src/wasm/cpu/index.ts";
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

  it("matmuls on 3 threads are bit-identical to one thread (every form, odd shapes)", () => {
    const one = wasmOps(instantiateCpuCore());
    const three = wasmOps(pool);
    const rng = new Rng(3);
    for (const [m, k, n] of [
      [2, 300, 700],
      [37, 300, 45],
      [130, 257, 99],
      [64, 64, 1000],
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
    const y = wasmOps(pool).matmul(new Float32Array([1, 2]), new Float32Array([3, 4]), { m: 1, k: 2, n: 1 });
    expect(Array.from(y)).toEqual([11]);
  });

  it("a closed pool refuses work", async () => {
    const p = await CpuPool.create(2);
    p.close();
    expect(() => p.run([{ name: "gemm", args: [] }])).toThrow(/closed/);
  });
});
