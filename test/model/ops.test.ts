import { describe, expect, it } from "vitest";
import { Rng } from "../../src/model/init.ts";
import * as ops from "../../src/model/reference/ops.ts";
import { dot, maxRelErr, maxScaledErr, numericGrad, randInt, randn } from "./helpers.ts";

// Every op's backward against central finite differences of L = sum(f(x) * R), R random, in Float64,
// on random odd shapes. Three trials per op, each with fresh shapes.
const TOL = 1e-6;
const trials = [11, 12, 13];

function check(analytic: ArrayLike<number>, f: () => number, x: Float64Array): void {
  const numeric = numericGrad(f, x);
  expect(
    maxScaledErr(
      analytic,
      numeric,
      Array.from({ length: x.length }, (_, i) => i),
    ),
  ).toBeLessThan(TOL);
}

describe("reference ops: forward values", () => {
  it("matmul variants agree with a naive triple loop", () => {
    const rng = new Rng(1);
    const [m, k, n] = [5, 9, 6]; // covers the unrolled-by-4 paths and their remainders
    const a = randn(rng, m * k);
    const b = randn(rng, k * n);
    const y = ops.matmul(a, b, { m, k, n });
    for (let i = 0; i < m; i++)
      for (let j = 0; j < n; j++) {
        let s = 0;
        for (let p = 0; p < k; p++) s += a[i * k + p] * b[p * n + j];
        expect(y[i * n + j]).toBeCloseTo(s, 12);
      }
    // a @ b == a @ (b^T)^T == (a^T)^T @ b
    const bt = new Float64Array(n * k);
    const at = new Float64Array(k * m);
    for (let p = 0; p < k; p++) for (let j = 0; j < n; j++) bt[j * k + p] = b[p * n + j];
    for (let i = 0; i < m; i++) for (let p = 0; p < k; p++) at[p * m + i] = a[i * k + p];
    expect(maxRelErr(ops.matmulABt(a, bt, { m, k, n }), y)).toBeLessThan(1e-12);
    expect(maxRelErr(ops.matmulAtB(at, b, { m, k, n }), y)).toBeLessThan(1e-12);
    expect(ops.matmul(new Float32Array(a), new Float32Array(b), { m, k, n })).toBeInstanceOf(Float32Array);
  });

  it("rmsnorm output has unit RMS before the weight", () => {
    const rng = new Rng(2);
    const x = randn(rng, 3 * 9, 4);
    const { y } = ops.rmsnorm(x, new Float64Array(9).fill(1), { rows: 3, dim: 9, eps: 0 });
    for (let r = 0; r < 3; r++) expect(dot(y.subarray(r * 9, r * 9 + 9), y.subarray(r * 9, r * 9 + 9)) / 9).toBeCloseTo(1, 10);
  });

  it("rope keeps norms, is identity at position 0, and rotates pairs (i, i+hd/2)", () => {
    const rng = new Rng(3);
    const hd = 6;
    const x = randn(rng, 2 * hd);
    const y = ops.rope(x, [0, 5], { rows: 2, heads: 1, headDim: hd, theta: 100 });
    for (let i = 0; i < hd; i++) expect(y[i]).toBe(x[i]);
    // pair i=1 at position 5 rotates by angle 5 * 100^(-2/6)
    const angle = 5 * Math.pow(100, -2 / 6);
    expect(y[hd + 1]).toBeCloseTo(x[hd + 1] * Math.cos(angle) - x[hd + 4] * Math.sin(angle), 12);
    expect(y[hd + 4]).toBeCloseTo(x[hd + 4] * Math.cos(angle) + x[hd + 1] * Math.sin(angle), 12);
    expect(dot(y, y)).toBeCloseTo(dot(x, x), 10);
  });

  it("attention: masked keys get zero probability, padded queries see themselves, rows sum to 1", () => {
    const rng = new Rng(4);
    const dims = { batch: 1, seq: 4, heads: 2, kvHeads: 1, headDim: 2 };
    const q = randn(rng, 4 * 4);
    const k = randn(rng, 4 * 2);
    const v = randn(rng, 4 * 2);
    const mask = [0, 1, 1, 0];
    const { out, probs } = ops.attention(q, k, v, mask, dims);
    const p = (h: number, i: number, j: number): number => probs[(h * 4 + i) * 4 + j];
    for (let h = 0; h < 2; h++) {
      expect(p(h, 0, 0)).toBe(1); // padded query with no visible key attends to itself
      expect(p(h, 2, 0)).toBe(0); // padded key invisible
      expect(p(h, 2, 3)).toBe(0); // future key invisible
      expect(p(h, 3, 0)).toBe(0);
      for (let i = 0; i < 4; i++) expect(p(h, i, 0) + p(h, i, 1) + p(h, i, 2) + p(h, i, 3)).toBeCloseTo(1, 12);
    }
    // query 0, head 0 output = v of token 0 (both heads share kv head 0)
    expect(out[0]).toBeCloseTo(v[0], 12);
    expect(out[2]).toBeCloseTo(v[0], 12);
  });

  it("attentionDecode equals the last query row of full attention over an unpadded sequence", () => {
    const rng = new Rng(8);
    const dims = { batch: 1, seq: 5, heads: 4, kvHeads: 2, headDim: 3 };
    const q = randn(rng, 5 * 12);
    const k = randn(rng, 5 * 6);
    const v = randn(rng, 5 * 6);
    const full = ops.attention(q, k, v, [1, 1, 1, 1, 1], dims).out;
    const last = ops.attentionDecode(q.subarray(4 * 12), k, v, 5, dims);
    expect(maxRelErr(last, full.subarray(4 * 12))).toBeLessThan(1e-12);
  });

  it("log-softmax gather and entropy match a direct computation", () => {
    const z = new Float64Array([1, 2, 3, 0.5]);
    const { logprob, entropy } = ops.logSoftmaxGatherEntropy(z, [2], { rows: 1, vocab: 4 });
    const e = Array.from(z, Math.exp);
    const s = e.reduce((a, b) => a + b);
    const p = e.map((x) => x / s);
    expect(logprob[0]).toBeCloseTo(Math.log(p[2]), 12);
    expect(entropy[0]).toBeCloseTo(-p.reduce((a, x) => a + x * Math.log(x), 0), 12);
  });

  it("embedding rejects out-of-range ids", () => {
    expect(() => ops.embedding([3], new Float64Array(6), { vocab: 3, dim: 2 })).toThrow(/outside/);
  });
});

describe("reference ops: backward vs finite differences (Float64, random odd shapes)", () => {
  it.each(trials)("matmul (seed %i)", (seed) => {
    const rng = new Rng(seed);
    const d = { m: randInt(rng, 1, 6), k: randInt(rng, 1, 7), n: randInt(rng, 1, 5) };
    const x = randn(rng, d.m * d.k);
    const w = randn(rng, d.k * d.n);
    const R = randn(rng, d.m * d.n);
    const f = (): number => dot(ops.matmul(x, w, d), R);
    const { dx, dw } = ops.matmulBackward(x, w, R, d);
    check(dx, f, x);
    check(dw, f, w);
  });

  it.each(trials)("embedding (seed %i)", (seed) => {
    const rng = new Rng(seed);
    const d = { vocab: randInt(rng, 2, 7), dim: randInt(rng, 1, 5) };
    const ids = Array.from({ length: randInt(rng, 1, 9) }, () => randInt(rng, 0, d.vocab - 1));
    const table = randn(rng, d.vocab * d.dim);
    const R = randn(rng, ids.length * d.dim);
    check(ops.embeddingBackward(ids, R, d), () => dot(ops.embedding(ids, table, d), R), table);
  });

  it.each(trials)("rmsnorm (seed %i)", (seed) => {
    const rng = new Rng(seed);
    const d = { rows: randInt(rng, 1, 5), dim: randInt(rng, 1, 9), eps: 1e-5 };
    const x = randn(rng, d.rows * d.dim);
    const w = randn(rng, d.dim);
    const R = randn(rng, d.rows * d.dim);
    const f = (): number => dot(ops.rmsnorm(x, w, d).y, R);
    const { rstd } = ops.rmsnorm(x, w, d);
    const { dx, dw } = ops.rmsnormBackward(x, w, rstd, R, d);
    check(dx, f, x);
    check(dw, f, w);
  });

  it.each(trials)("rope (seed %i)", (seed) => {
    const rng = new Rng(seed);
    const d = { rows: randInt(rng, 1, 5), heads: randInt(rng, 1, 3), headDim: 2 * randInt(rng, 1, 4), theta: 10000 };
    const pos = Array.from({ length: d.rows }, () => randInt(rng, 0, 50));
    const x = randn(rng, d.rows * d.heads * d.headDim);
    const R = randn(rng, x.length);
    check(ops.ropeBackward(R, pos, d), () => dot(ops.rope(x, pos, d), R), x);
  });

  it.each(trials)("attention with GQA and padding (seed %i)", (seed) => {
    const rng = new Rng(seed);
    const kvHeads = randInt(rng, 1, 2);
    const d = {
      batch: randInt(rng, 1, 3),
      seq: randInt(rng, 1, 6),
      heads: kvHeads * randInt(rng, 1, 3),
      kvHeads,
      headDim: randInt(rng, 1, 5),
    };
    const mask = Array.from({ length: d.batch * d.seq }, () => (rng.uniform() < 0.75 ? 1 : 0));
    const q = randn(rng, d.batch * d.seq * d.heads * d.headDim);
    const k = randn(rng, d.batch * d.seq * d.kvHeads * d.headDim);
    const v = randn(rng, k.length);
    const R = randn(rng, q.length);
    const f = (): number => dot(ops.attention(q, k, v, mask, d).out, R);
    const { probs } = ops.attention(q, k, v, mask, d);
    const { dq, dk, dv } = ops.attentionBackward(q, k, v, probs, R, d);
    check(dq, f, q);
    check(dk, f, k);
    check(dv, f, v);
  });

  it.each(trials)("swiglu (seed %i)", (seed) => {
    const rng = new Rng(seed);
    const n = randInt(rng, 1, 13);
    const g = randn(rng, n, 2);
    const u = randn(rng, n);
    const R = randn(rng, n);
    const f = (): number => dot(ops.swiglu(g, u), R);
    const { dgate, dup } = ops.swigluBackward(g, u, R);
    check(dgate, f, g);
    check(dup, f, u);
  });

  it.each(trials)("log-softmax + gather + entropy (seed %i)", (seed) => {
    const rng = new Rng(seed);
    const d = { rows: randInt(rng, 1, 5), vocab: randInt(rng, 2, 11) };
    const z = randn(rng, d.rows * d.vocab, 2);
    const t = Array.from({ length: d.rows }, () => randInt(rng, 0, d.vocab - 1));
    const gl = randn(rng, d.rows);
    const ge = randn(rng, d.rows);
    const f = (): number => {
      const o = ops.logSoftmaxGatherEntropy(z, t, d);
      return dot(o.logprob, gl) + dot(o.entropy, ge);
    };
    const o = ops.logSoftmaxGatherEntropy(z, t, d);
    check(ops.logSoftmaxGatherEntropyBackward(z, t, o.lse, o.entropy, gl, ge, d), f, z);
  });
});
