/**
 * The Wasm CPU kernels (assembly/cpu/, through src/cpu/wasm-ops.ts) against the plain-TS reference on
 * random odd shapes (sizes off every tile and block: MR 4, NR 8, KC 256, NC 512), with the tolerances of
 * src/cpu/README.md, and their backwards against central finite differences of the
 * reference forward in Float64.
 */
import { describe, expect, it } from "vitest";
import { Rng } from "../../src/model/init.ts";
import * as ref from "../../src/model/reference/ops.ts";
import { adamwStep } from "../../src/model/reference/optim.ts";
import { WasmOps } from "../../src/cpu/wasm-ops.ts";
import { ValidationError } from "../../src/types/errors.ts";
import { GEMM_FORM, instantiateCpuCore } from "../../src/cpu/kernels/index.ts";
import { maxScaledErr, numericGrad, randInt, randn, sampleIndices } from "../model/helpers.ts";

const ops = new WasmOps(instantiateCpuCore());
const f32 = (rng: Rng, n: number, std = 1) => Float32Array.from(randn(rng, n, std));
const U = 2 ** -24; // f32 unit roundoff

/** Every |a_i - b_i| <= rel |b_i| + abs max|b| (abs: the cancellation floor, relative to the array's scale). */
function expectClose(name: string, a: ArrayLike<number>, b: ArrayLike<number>, rel: number, abs: number): void {
  expect(a.length, name).toBe(b.length);
  let scale = 0;
  for (let i = 0; i < b.length; i++) scale = Math.max(scale, Math.abs(b[i]));
  for (let i = 0; i < b.length; i++) {
    const bound = rel * Math.abs(b[i]) + abs * scale;
    if (!(Math.abs(a[i] - b[i]) <= bound)) expect.fail(`${name}[${i}]: ${a[i]} vs reference ${b[i]} (bound ${bound})`);
  }
}

const abs = (x: Float32Array) => Float64Array.from(x, Math.abs);

// m: 1-3 take the unpacked small-m paths, 4+ the packed kernel; k crosses KC = 256; n crosses NC = 512
const SHAPES: [number, number, number][] = [
  [1, 1, 1],
  [1, 33, 17],
  [2, 257, 31],
  [3, 100, 530],
  [4, 8, 8],
  [5, 9, 6],
  [7, 300, 530],
  [33, 513, 67],
  [130, 260, 9],
];

describe("Wasm GEMM vs the reference (f32 accumulation)", () => {
  // Bound: a sum of k f32 products accumulated in f32 is within (k + 2) u sum|a||b| of the exact sum
  // (the reference's f64 sum is exact to far below that), element by element.
  for (const [m, k, n] of SHAPES) {
    it(`${m}x${k}x${n}: A B, A B^T, A^T B within (k + 2) u |A||B|`, () => {
      const rng = new Rng(m * 1000 + k * 10 + n);
      const a = f32(rng, m * k);
      const b = f32(rng, k * n);
      const at = new Float32Array(k * m);
      const bt = new Float32Array(n * k);
      for (let i = 0; i < m; i++) for (let p = 0; p < k; p++) at[p * m + i] = a[i * k + p];
      for (let p = 0; p < k; p++) for (let j = 0; j < n; j++) bt[j * k + p] = b[p * n + j];
      const exact = ref.matmul(Float64Array.from(a), Float64Array.from(b), { m, k, n });
      const bound = ref.matmul(abs(a), abs(b), { m, k, n });
      for (const [name, y] of [
        ["AB", ops.matmul(a, b, { m, k, n })],
        ["ABt", ops.matmulABt(a, bt, { m, k, n })],
        ["AtB", ops.matmulAtB(at, b, { m, k, n })],
      ] as const) {
        expect(y).toBeInstanceOf(Float32Array);
        expect(y.length).toBe(m * n);
        for (let i = 0; i < m * n; i++) {
          const tol = (k + 2) * U * bound[i] + 1e-30;
          if (!(Math.abs(y[i] - exact[i]) <= tol)) expect.fail(`${name}[${i}] ${y[i]} vs ${exact[i]} (tol ${tol})`);
        }
      }
    });
  }

  it("splitting the columns (as threads will) gives bit-identical results", () => {
    const core = instantiateCpuCore();
    const rng = new Rng(7);
    for (const [m, k, n] of [
      [2, 300, 537],
      [37, 270, 537],
    ]) {
      for (const form of [GEMM_FORM.AB, GEMM_FORM.ABT, GEMM_FORM.ATB]) {
        const a = f32(rng, m * k);
        const b = f32(rng, k * n);
        core.begin();
        const [pa, pb, full, split] = [core.alloc(a.byteLength), core.alloc(b.byteLength), core.alloc(m * n * 4), core.alloc(m * n * 4)];
        const scratch = core.alloc(core.exports.gemmScratchBytes());
        core.view(Float32Array, pa, a.length).set(a);
        core.view(Float32Array, pb, b.length).set(b);
        core.exports.gemm(form, pa, pb, full, m, k, n, 0, n, scratch);
        for (const [j0, j1] of [
          [0, 13],
          [13, 200],
          [200, 536],
          [536, 537],
        ])
          core.exports.gemm(form, pa, pb, split, m, k, n, j0, j1, scratch);
        expect(core.view(Float32Array, split, m * n)).toEqual(core.view(Float32Array, full, m * n));
      }
    }
  });

  it("matmulBackward: dx = dy W^T, dw = x^T dy", () => {
    const rng = new Rng(8);
    const [m, k, n] = [9, 21, 13];
    const x = f32(rng, m * k);
    const w = f32(rng, k * n);
    const dy = f32(rng, m * n);
    const got = ops.matmulBackward(x, w, dy, { m, k, n });
    const want = ref.matmulBackward(x, w, dy, { m, k, n });
    expectClose("dx", got.dx, want.dx, 0, (n + 2) * U * 4);
    expectClose("dw", got.dw, want.dw, 0, (m + 2) * U * 4);
  });

  it("k = 0 gives zeros; a wrong length throws a ValidationError naming the operand", () => {
    expect(Array.from(ops.matmul(new Float32Array(0), new Float32Array(0), { m: 2, k: 0, n: 3 }))).toEqual([0, 0, 0, 0, 0, 0]);
    expect(() => ops.matmul(new Float32Array(5), new Float32Array(6), { m: 2, k: 3, n: 2 })).toThrow(ValidationError);
    expect(() => ops.matmulABt(new Float32Array(6), new Float32Array(5), { m: 2, k: 3, n: 2 })).toThrow(/^b has 5/);
  });
});

describe("Wasm row and elementwise kernels vs the reference", () => {
  it("rmsnorm and its backward: f64 arithmetic, ~1 ulp (sums in another order)", () => {
    const rng = new Rng(10);
    for (const [rows, dim] of [
      [1, 1],
      [13, 67],
      [5, 896],
    ]) {
      const x = f32(rng, rows * dim, 3);
      const w = f32(rng, dim);
      const dy = f32(rng, rows * dim);
      const got = ops.rmsnorm(x, w, { rows, dim, eps: 1e-5 });
      const want = ref.rmsnorm(x, w, { rows, dim, eps: 1e-5 });
      expectClose("y", got.y, want.y, 2 * U, 1e-7);
      expectClose("rstd", got.rstd, want.rstd, 2 * U, 0);
      const g = ops.rmsnormBackward(x, w, want.rstd, dy, { rows, dim });
      const h = ref.rmsnormBackward(x, w, want.rstd, dy, { rows, dim });
      expectClose("dx", g.dx, h.dx, 2 * U, 1e-7);
      expectClose("dw", g.dw, h.dw, 2 * U, 1e-7);
    }
  });

  it("rope and its backward (rotate_half): f64 arithmetic, ~1 ulp; llama3 scaling included", () => {
    const rng = new Rng(11);
    const scaling = {
      rope_type: "llama3" as const,
      factor: 8,
      low_freq_factor: 1,
      high_freq_factor: 4,
      original_max_position_embeddings: 64,
    };
    for (const dims of [
      { rows: 11, heads: 3, headDim: 10, theta: 10000 },
      { rows: 7, heads: 2, headDim: 64, theta: 500000, scaling },
    ]) {
      const x = f32(rng, dims.rows * dims.heads * dims.headDim);
      const pos = Array.from({ length: dims.rows }, () => randInt(rng, 0, 5000));
      expectClose("rope", ops.rope(x, pos, dims), ref.rope(x, pos, dims), 2 * U, 1e-7);
      expectClose("ropeBackward", ops.ropeBackward(x, pos, dims), ref.ropeBackward(x, pos, dims), 2 * U, 1e-7);
    }
  });

  it("rope, interleaved pairs (2i, 2i+1): the rotate_half rotation of the de-interleaved head", () => {
    const rng = new Rng(12);
    const dims = { rows: 5, heads: 3, headDim: 12, theta: 10000 };
    const { rows, heads, headDim: hd } = dims;
    const x = f32(rng, rows * heads * hd);
    const pos = [0, 3, 17, 100, 2047];
    // de-interleave each head: (x0, x1, x2, x3, ...) -> (x0, x2, ..., x1, x3, ...)
    const perm = (v: ArrayLike<number>, back: boolean) => {
      const out = new Float32Array(v.length);
      for (let o = 0; o < v.length; o += hd)
        for (let i = 0; i < hd / 2; i++) {
          if (back) {
            out[o + 2 * i] = v[o + i];
            out[o + 2 * i + 1] = v[o + i + hd / 2];
          } else {
            out[o + i] = v[o + 2 * i];
            out[o + i + hd / 2] = v[o + 2 * i + 1];
          }
        }
      return out;
    };
    const want = perm(ref.rope(perm(x, false), pos, dims), true);
    expectClose("interleaved", ops.rope(x, pos, { ...dims, interleaved: true }), want, 2 * U, 1e-7);
    const back = ops.ropeBackward(ops.rope(x, pos, { ...dims, interleaved: true }), pos, { ...dims, interleaved: true });
    expectClose("inverse", back, x, 8 * U, 1e-7);
  });

  it("swiglu and its backward: f32 with a ~2-ulp exp, within 1e-6 relative", () => {
    const rng = new Rng(13);
    for (const n of [1, 3, 1031]) {
      const g = f32(rng, n, 6);
      const u = f32(rng, n);
      const dy = f32(rng, n);
      expectClose("y", ops.swiglu(g, u), ref.swiglu(g, u), 1e-6, 1e-7);
      const got = ops.swigluBackward(g, u, dy);
      const want = ref.swigluBackward(g, u, dy);
      expectClose("dgate", got.dgate, want.dgate, 1e-6, 1e-6);
      expectClose("dup", got.dup, want.dup, 1e-6, 1e-7);
    }
  });

  it("logSoftmaxGatherEntropy and its backward: sums in f64, exp in f32; within 1e-6 (1 + |x|)", () => {
    const rng = new Rng(14);
    for (const [rows, vocab] of [
      [1, 1],
      [9, 1001],
      [3, 4099],
    ]) {
      const z = f32(rng, rows * vocab, 6);
      const t = Array.from({ length: rows }, () => randInt(rng, 0, vocab - 1));
      const got = ops.logSoftmaxGatherEntropy(z, t, { rows, vocab });
      const want = ref.logSoftmaxGatherEntropy(z, t, { rows, vocab });
      for (const key of ["logprob", "entropy", "lse"] as const)
        for (let r = 0; r < rows; r++)
          expect(Math.abs(got[key][r] - want[key][r]), key).toBeLessThanOrEqual(1e-6 * (1 + Math.abs(want[key][r])));
      const gl = f32(rng, rows);
      const ge = f32(rng, rows);
      gl[0] = 0;
      ge[0] = 0; // a row with no gradient: zeros
      const dz = ops.logSoftmaxGatherEntropyBackward(z, t, want.lse, want.entropy, gl, ge, { rows, vocab });
      expectClose("dz", dz, ref.logSoftmaxGatherEntropyBackward(z, t, want.lse, want.entropy, gl, ge, { rows, vocab }), 1e-5, 1e-6);
    }
    expect(() => ops.logSoftmaxGatherEntropy(new Float32Array(4), [4], { rows: 1, vocab: 4 })).toThrow(/targets 4 outside/);
  });

  it("adamwStep: bit-identical to the reference (same f64 arithmetic, same roundings)", () => {
    const rng = new Rng(15);
    const n = 1003;
    const p1 = f32(rng, n);
    const p2 = p1.slice();
    const s1 = { step: 0, m: new Float32Array(n), v: new Float32Array(n) };
    const s2 = { step: 0, m: new Float32Array(n), v: new Float32Array(n) };
    const o = { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01, maxGradNorm: 1 };
    for (let step = 0; step < 3; step++) {
      const g = f32(rng, n);
      ops.adamwStep(p1, g, s1, o);
      adamwStep(p2, g, s2, o);
    }
    expect(p1).toEqual(p2);
    expect(s1).toEqual(s2);
  });
});

describe("Wasm attention vs the reference (f32 dot products and accumulations)", () => {
  const cases = [
    { batch: 1, seq: 1, heads: 1, kvHeads: 1, headDim: 4 },
    { batch: 2, seq: 13, heads: 6, kvHeads: 2, headDim: 9 },
    { batch: 1, seq: 40, heads: 4, kvHeads: 1, headDim: 64 },
    // the calc demo's head dim (keys four at a time, a masked key inside a group of four, a tail of 1-3)
    { batch: 3, seq: 22, heads: 4, kvHeads: 2, headDim: 16 },
  ];
  for (const dims of cases) {
    it(`B${dims.batch} T${dims.seq} H${dims.heads}/${dims.kvHeads} hd${dims.headDim}: forward, backward within 1e-5 of the scale`, () => {
      const rng = new Rng(dims.seq * 100 + dims.headDim);
      const { batch: B, seq: T, heads: H, kvHeads: KV, headDim: hd } = dims;
      const q = f32(rng, B * T * H * hd, 2);
      const k = f32(rng, B * T * KV * hd, 2);
      const v = f32(rng, B * T * KV * hd);
      const mask = Array.from({ length: B * T }, () => (rng.nextU32() % 4 === 0 ? 0 : 1));
      const got = ops.attention(q, k, v, mask, dims);
      const want = ref.attention(q, k, v, mask, dims);
      expectClose("out", got.out, want.out, 1e-5, 1e-6);
      expectClose("probs", got.probs, want.probs, 1e-5, 1e-7);
      for (let i = 0; i < want.probs.length; i++) if (want.probs[i] === 0) expect(got.probs[i]).toBe(0);
      expect(ops.attention(q, k, v, mask, dims, false)).toEqual({ out: got.out, probs: new Float32Array(0) });
      const dout = f32(rng, q.length);
      const g = ops.attentionBackward(q, k, v, want.probs, dout, dims);
      const h = ref.attentionBackward(q, k, v, want.probs, dout, dims);
      expectClose("dq", g.dq, h.dq, 1e-5, 1e-5);
      expectClose("dk", g.dk, h.dk, 1e-5, 1e-5);
      expectClose("dv", g.dv, h.dv, 1e-5, 1e-5);
    });
  }

  it("decode: one query against a longer cache's first len positions", () => {
    const rng = new Rng(21);
    const dims = { heads: 6, kvHeads: 2, headDim: 10 };
    const q = f32(rng, 60, 2);
    const kc = f32(rng, 50 * 20, 2);
    const vc = f32(rng, 50 * 20);
    for (const len of [1, 7, 50])
      expectClose(`len ${len}`, ops.attentionDecode(q, kc, vc, len, dims), ref.attentionDecode(q, kc, vc, len, dims), 1e-5, 1e-6);
    expect(() => ops.attentionDecode(q, kc, vc, 51, dims)).toThrow(/kCache/);
  });

  it("decode at head dim 16 (keys four at a time) agrees with the batched forward's last row", () => {
    const rng = new Rng(22);
    const dims = { batch: 1, seq: 11, heads: 4, kvHeads: 2, headDim: 16 };
    const q = f32(rng, 11 * 64, 2);
    const k = f32(rng, 11 * 32, 2);
    const v = f32(rng, 11 * 32);
    const full = ops.attention(q, k, v, new Array(11).fill(1), dims, false).out;
    const dec = ops.attentionDecode(q.subarray(10 * 64), k, v, 11, dims);
    expectClose("decode", dec, ref.attentionDecode(q.subarray(10 * 64), k, v, 11, dims), 1e-5, 1e-6);
    expect(dec).toEqual(full.subarray(10 * 64));
  });
});

describe("Wasm backwards vs central finite differences of the Float64 reference forward", () => {
  // L = sum(f(x) * R); the numeric gradient is of the f64 reference at the same f32 inputs, so this checks
  // the Wasm backward's math independently of the reference backward.
  const TOL = 1e-4;
  const check = (name: string, analytic: ArrayLike<number>, f: () => number, x: Float64Array, rng: Rng) => {
    const idx = sampleIndices(rng, x.length, 40);
    expect(maxScaledErr(analytic, numericGrad(f, x, 1e-5, idx), idx), name).toBeLessThan(TOL);
  };
  const dot = (a: ArrayLike<number>, r: ArrayLike<number>) => {
    let s = 0;
    for (let i = 0; i < a.length; i++) s += a[i] * r[i];
    return s;
  };

  it("rmsnorm, swiglu, rope, log-softmax/entropy, attention", () => {
    const rng = new Rng(31);
    {
      const [rows, dim] = [5, 11];
      const x = Float64Array.from(f32(rng, rows * dim));
      const w = Float64Array.from(f32(rng, dim));
      const R = randn(rng, rows * dim);
      const rstd = ops.rmsnorm(Float32Array.from(x), Float32Array.from(w), { rows, dim, eps: 1e-5 }).rstd;
      const g = ops.rmsnormBackward(Float32Array.from(x), Float32Array.from(w), rstd, Float32Array.from(R), { rows, dim });
      const L = () => dot(ref.rmsnorm(x, w, { rows, dim, eps: 1e-5 }).y, R);
      check("rmsnorm dx", g.dx, L, x, rng);
      check("rmsnorm dw", g.dw, L, w, rng);
    }
    {
      const n = 37;
      const gate = Float64Array.from(f32(rng, n, 3));
      const up = Float64Array.from(f32(rng, n));
      const R = randn(rng, n);
      const g = ops.swigluBackward(Float32Array.from(gate), Float32Array.from(up), Float32Array.from(R));
      const L = () => dot(ref.swiglu(gate, up), R);
      check("swiglu dgate", g.dgate, L, gate, rng);
      check("swiglu dup", g.dup, L, up, rng);
    }
    {
      const dims = { rows: 3, heads: 2, headDim: 8, theta: 10000 };
      const x = Float64Array.from(f32(rng, 48));
      const R = randn(rng, 48);
      const pos = [1, 9, 40];
      check("rope dx", ops.ropeBackward(Float32Array.from(R), pos, dims), () => dot(ref.rope(x, pos, dims), R), x, rng);
    }
    {
      const [rows, vocab] = [3, 29];
      const z = Float64Array.from(f32(rng, rows * vocab, 2));
      const t = [0, 28, 5];
      const Rl = randn(rng, rows);
      const Re = randn(rng, rows);
      const fwd = ops.logSoftmaxGatherEntropy(Float32Array.from(z), t, { rows, vocab });
      const dz = ops.logSoftmaxGatherEntropyBackward(
        Float32Array.from(z),
        t,
        fwd.lse,
        fwd.entropy,
        Float32Array.from(Rl),
        Float32Array.from(Re),
        {
          rows,
          vocab,
        },
      );
      const L = () => {
        const o = ref.logSoftmaxGatherEntropy(z, t, { rows, vocab });
        return dot(o.logprob, Rl) + dot(o.entropy, Re);
      };
      check("logits", dz, L, z, rng);
    }
    {
      const dims = { batch: 1, seq: 6, heads: 4, kvHeads: 2, headDim: 5 };
      const n = 6 * 4 * 5;
      const nk = 6 * 2 * 5;
      const q = Float64Array.from(f32(rng, n));
      const k = Float64Array.from(f32(rng, nk));
      const v = Float64Array.from(f32(rng, nk));
      const mask = [1, 0, 1, 1, 0, 1];
      const R = randn(rng, n);
      const [q32, k32, v32] = [Float32Array.from(q), Float32Array.from(k), Float32Array.from(v)];
      const fwd = ops.attention(q32, k32, v32, mask, dims);
      const g = ops.attentionBackward(q32, k32, v32, fwd.probs, Float32Array.from(R), dims);
      const L = () => dot(ref.attention(q, k, v, mask, dims, false).out, R);
      check("attention dq", g.dq, L, q, rng);
      check("attention dk", g.dk, L, k, rng);
      check("attention dv", g.dv, L, v, rng);
    }
  });

  it("Float64 inputs go to the reference (the oracle) unchanged", () => {
    const rng = new Rng(41);
    const a = randn(rng, 12);
    const b = randn(rng, 12);
    const y = ops.matmul(a, b, { m: 3, k: 4, n: 3 });
    expect(y).toBeInstanceOf(Float64Array);
    expect(y).toEqual(ref.matmul(a, b, { m: 3, k: 4, n: 3 }));
  });
});

describe("results copied out of Wasm memory", () => {
  it("small results (carved from a shared slab) and large ones are arrays of their own that later calls leave alone", () => {
    const rng = new Rng(31);
    const kept: Float32Array[] = [];
    // enough small calls to fill several slabs, with sizes on both sides of the slab threshold
    for (let i = 0; i < 300; i++) {
      const n = [1, 7, 64, 264, 512, 513, 2000][i % 7];
      const gate = f32(rng, n);
      const up = f32(rng, n);
      const got = ops.swiglu(gate, up);
      expectClose(`n ${n}`, got, ref.swiglu(gate, up), 1e-6, 1e-6);
      kept.push(got as Float32Array);
      got.fill(i); // writing one result must not reach another (or Wasm memory)
    }
    kept.forEach((got, i) => expect(got.every((x) => x === i)).toBe(true));
    const gate = f32(rng, 100);
    const up = f32(rng, 100);
    expectClose("after", ops.swiglu(gate, up), ref.swiglu(gate, up), 1e-6, 1e-6);
  });
});
