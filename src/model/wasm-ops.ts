/**
 * The model ops on the Wasm SIMD kernels (assembly/cpu/, loaded by src/wasm/cpu/), with exactly the
 * signatures of the plain-TS reference (`reference/ops.ts`, `reference/optim.ts`): a `ModelOps` backend
 * (ops-backend.ts) for reference.ts's forward and backward. Float32 inputs run in Wasm (copied into the instance's memory, results
 * copied out into fresh arrays: nothing returned aliases Wasm memory); Float64 inputs (finite-difference
 * checks) go to the reference, which stays the oracle. Accumulation rules and tolerances: src/wasm/README.md.
 */
import { ValidationError } from "../types/errors.ts";
import { CpuCore, cpuCore, GEMM_FORM } from "../wasm/cpu/index.ts";
import { CpuPool, type Task } from "./cpu-pool.ts";
import { ropeInvFreq } from "./config.ts";
import type { ModelOps, Residency } from "./ops-backend.ts";
import { fusedDecodeStepper } from "./wasm-decode.ts";
import * as ref from "./reference/ops.ts";
import type { Arr, AttentionDims, MatDims, NormDims, RopeDims, VocabDims } from "./reference/ops.ts";
import type { OptimizerOptions, OptimizerState } from "./train-types.ts";

/** RoPE dims plus the pair convention: `interleaved` rotates (2i, 2i+1) instead of (i, i + hd/2). */
export interface WasmRopeDims extends RopeDims {
  interleaved?: boolean;
}

/** The Wasm backend: every ModelOps op, RoPE with the choice of pair convention. */
export interface WasmModelOps extends ModelOps {
  resident: Residency;
  rope(x: Arr, positions: ArrayLike<number>, dims: WasmRopeDims): Arr;
  ropeBackward(dy: Arr, positions: ArrayLike<number>, dims: WasmRopeDims): Arr;
}

type Ctor = Float32ArrayConstructor | Float64ArrayConstructor | Int32ArrayConstructor;

function checkLength(name: string, a: ArrayLike<number>, expected: number): void {
  if (a.length !== expected) throw new ValidationError(`${name} has ${a.length} elements, expected ${expected}`, [name]);
}

function checkInt(name: string, value: number, lo: number, hi: number): void {
  if (!(Number.isInteger(value) && value >= lo && value < hi)) throw new ValidationError(`${name} ${value} outside [${lo}, ${hi})`, [name]);
}

const isF64 = (x: Arr): x is Float64Array => x instanceof Float64Array;

/**
 * One kernel call: allocate every input and output first (growth detaches views), then copy inputs in,
 * run, and copy outputs out.
 */
class CallBase {
  /** [pointer, contents (null: zeros), element type, length] */
  private readonly fills: [number, ArrayLike<number> | null, Ctor, number][] = [];
  constructor(
    private readonly core: CpuCore,
    private readonly resident: ReadonlyMap<ArrayLike<number>, number>,
  ) {
    core.begin();
  }
  /** A resident array's pointer, else a fresh copy's. */
  in(x: ArrayLike<number>, ctor: Ctor = Float32Array): number {
    const at = this.resident.get(x);
    if (at !== undefined) return at;
    const ptr = this.core.alloc(x.length * ctor.BYTES_PER_ELEMENT);
    this.fills.push([ptr, x, ctor, x.length]);
    return ptr;
  }
  out(n: number, ctor: Ctor = Float32Array): number {
    return this.core.alloc(n * ctor.BYTES_PER_ELEMENT);
  }
  zeros(n: number, ctor: Ctor = Float32Array): number {
    const ptr = this.out(n, ctor);
    this.fills.push([ptr, null, ctor, n]);
    return ptr;
  }
  run(kernel: () => void): void {
    for (const [ptr, x, ctor, n] of this.fills) {
      if (x) this.core.write(ctor as Float32ArrayConstructor, ptr, x);
      else this.core.zero(ctor as Float32ArrayConstructor, ptr, n);
    }
    kernel();
  }
  f32(ptr: number, n: number): Float32Array {
    return this.core.read(Float32Array, ptr, n);
  }
  f64(ptr: number, n: number): Float64Array {
    return this.core.read(Float64Array, ptr, n);
  }
  /** Copies Wasm memory back into an existing array (in-place ops). */
  into(ptr: number, target: Float32Array): void {
    target.set(this.core.view(Float32Array, ptr, target.length));
  }
}

function i32(x: ArrayLike<number>): Int32Array {
  return x instanceof Int32Array ? x : Int32Array.from(x as ArrayLike<number>);
}

/** GEMMs smaller than this many multiply-adds stay on one thread (waking workers costs microseconds). */
const PARALLEL_MIN_WORK = 1 << 18;

/**
 * Column ranges of n for `parts` threads: fixed by (n, parts) alone, boundaries on multiples of 8 (the
 * kernel's panel width). Any split gives the same bits: an element's arithmetic does not depend on it.
 */
export function columnRanges(n: number, parts: number): [number, number][] {
  return splitRanges(n, parts, 8);
}

/** [i0, i1) ranges of [0, count) in `parts`, boundaries on multiples of `align`, fixed by the arguments. */
export function splitRanges(count: number, parts: number, align = 1): [number, number][] {
  const units = Math.ceil(count / align);
  const out: [number, number][] = [];
  for (let t = 0; t < parts; t++) {
    const i0 = Math.min(count, Math.floor((units * t) / parts) * align);
    const i1 = Math.min(count, Math.floor((units * (t + 1)) / parts) * align);
    if (i1 > i0) out.push([i0, i1]);
  }
  return out;
}

/**
 * The tasks of one GEMM over `scratch.length` threads (one scratch region each), in fixed ranges: columns
 * on multiples of 8, or — few columns, many rows (the demo's d = 64 projections), so that no thread packs
 * all of A for a sliver of B — rows on multiples of 4 (not A^T B, whose A row stride is m). Every split gives
 * the same bits.
 */
export function gemmTasks(form: number, pa: number, pb: number, pc: number, m: number, k: number, n: number, scratch: number[]): Task[] {
  const threads = scratch.length;
  if (threads > 1 && form !== GEMM_FORM.ATB && n < 64 * threads && m >= 16 * threads)
    return splitRanges(m, threads, 4).map(([i0, i1], t) => ({
      name: "gemm",
      args: [form, pa + i0 * k * 4, pb, pc + i0 * n * 4, i1 - i0, k, n, 0, n, scratch[t]],
    }));
  return columnRanges(n, threads).map(([j0, j1], t) => ({ name: "gemm", args: [form, pa, pb, pc, m, k, n, j0, j1, scratch[t]] }));
}

/**
 * Most bytes kept resident: larger weights (a 0.5B+ Hugging Face model) are copied per call as before,
 * so the 4 GiB Wasm memory keeps room for the per-call arena.
 */
const RESIDENT_MAX_BYTES = 1 << 30;

/** Rows per dw accumulator block of the RMSNorm backward: fixed, so dw does not depend on the thread count. */
const NORM_CHUNK = 256;

/**
 * The Wasm backend over `target`: an instance (default: the process's shared one, created on first use)
 * or a worker pool. On a pool, large calls are split in fixed ranges — GEMM by columns (or rows when n is
 * small), row-wise kernels by
 * rows, attention by (batch row, kv head) — and every split gives the bits one thread gives.
 */
export function wasmOps(target?: CpuCore | CpuPool): WasmModelOps {
  const pool = target instanceof CpuPool ? target : null;
  let c = target instanceof CpuCore ? target : pool?.core;
  const get = () => (c ??= cpuCore());
  // resident arrays (by identity) and their pointers, in pinning order
  const resident = new Map<ArrayLike<number>, number>();
  const pinned: [Float32Array, number, number][] = [];
  class Call extends CallBase {
    constructor(core: CpuCore) {
      super(core, resident);
    }
  }
  const residentBytes = () => (pinned.length === 0 ? 0 : get().mark - pinned[0][2]);
  const residency: Residency = {
    pin(arrays) {
      const core = get();
      const fresh = [...new Set(arrays)].filter((x) => x instanceof Float32Array && !resident.has(x));
      const bytes = fresh.reduce((a, x) => a + x.byteLength + 16, 0);
      if (residentBytes() + bytes > RESIDENT_MAX_BYTES) return false;
      for (const x of fresh) {
        const mark = core.mark;
        const ptr = core.reserve(x.byteLength);
        core.view(Float32Array, ptr, x.length).set(x);
        resident.set(x, ptr);
        pinned.push([x, ptr, mark]);
      }
      return true;
    },
    write(x, offset, length) {
      const ptr = resident.get(x);
      if (ptr === undefined) return;
      if (!(offset >= 0 && length >= 0 && offset + length <= x.length))
        throw new ValidationError(`range [${offset}, ${offset + length}) outside the array's ${x.length} elements`, ["offset"]);
      get()
        .view(Float32Array, ptr + offset * 4, length)
        .set(x.subarray(offset, offset + length));
    },
    mark: () => pinned.length,
    release(mark = 0) {
      if (pinned.length <= mark) return;
      const core = get();
      core.releaseTo(pinned[mark][2]);
      for (const [x] of pinned.splice(mark)) resident.delete(x);
    },
  };

  /**
   * Runs task(i0, i1) over [0, count): in fixed ranges on the pool when `work` is large enough to pay for
   * waking the workers, else once here.
   */
  function split(count: number, work: number, task: (i0: number, i1: number) => Task, align = 1): void {
    const ranges = pool && work >= PARALLEL_MIN_WORK ? splitRanges(count, pool.threads, align) : [];
    if (ranges.length > 1) {
      pool!.run(ranges.map(([i0, i1]) => task(i0, i1)));
      return;
    }
    const t = task(0, count);
    (get().exports[t.name] as unknown as (...a: number[]) => void)(...t.args);
  }

  function gemm(form: number, a: Arr, b: Arr, { m, k, n }: MatDims, aLen: number, bLen: number): Float32Array {
    checkLength("a", a, aLen);
    checkLength("b", b, bLen);
    const core = get();
    const call = new Call(core);
    const pa = call.in(a);
    const pb = call.in(b);
    const py = call.out(m * n);
    const threads = pool && m * n * k >= PARALLEL_MIN_WORK ? pool.threads : 1;
    const scratch = Array.from({ length: threads }, () => call.out(core.exports.gemmScratchBytes() / 4));
    const tasks = gemmTasks(form, pa, pb, py, m, k, n, scratch);
    call.run(() => {
      if (tasks.length === 1) core.exports.gemm(...(tasks[0].args as Parameters<typeof core.exports.gemm>));
      else pool!.run(tasks);
    });
    return call.f32(py, m * n);
  }

  const matmul = (a: Arr, b: Arr, d: MatDims): Arr => (isF64(a) ? ref.matmul(a, b, d) : gemm(GEMM_FORM.AB, a, b, d, d.m * d.k, d.k * d.n));
  const matmulABt = (a: Arr, b: Arr, d: MatDims): Arr =>
    isF64(a) ? ref.matmulABt(a, b, d) : gemm(GEMM_FORM.ABT, a, b, d, d.m * d.k, d.n * d.k);
  const matmulAtB = (a: Arr, b: Arr, d: MatDims): Arr =>
    isF64(a) ? ref.matmulAtB(a, b, d) : gemm(GEMM_FORM.ATB, a, b, d, d.k * d.m, d.k * d.n);

  // the last table, by its arguments (scaling by identity): decode rotates q and k of every layer per token
  let lastFreq: { headDim: number; theta: number; scaling: WasmRopeDims["scaling"]; table: Float64Array } | null = null;
  const invFreq = (headDim: number, theta: number, scaling: WasmRopeDims["scaling"]): Float64Array => {
    if (!lastFreq || lastFreq.headDim !== headDim || lastFreq.theta !== theta || lastFreq.scaling !== scaling)
      lastFreq = { headDim, theta, scaling, table: ropeInvFreq(headDim, theta, scaling) };
    return lastFreq.table;
  };

  function rotate(x: Arr, positions: ArrayLike<number>, dims: WasmRopeDims, sign: 1 | -1): Arr {
    const { rows, heads, headDim, theta, scaling, interleaved } = dims;
    checkLength("x", x, rows * heads * headDim);
    checkLength("positions", positions, rows);
    const core = get();
    const call = new Call(core);
    const px = call.in(x);
    const pp = call.in(i32(positions), Int32Array);
    const pf = call.in(invFreq(headDim, theta, scaling), Float64Array);
    const py = call.out(x.length);
    const rowBytes = heads * headDim * 4;
    call.run(() =>
      split(rows, x.length, (r0, r1) => ({
        name: "rope",
        args: [px + r0 * rowBytes, py + r0 * rowBytes, pp + r0 * 4, pf, r1 - r0, heads, headDim, sign, interleaved ? 1 : 0],
      })),
    );
    return call.f32(py, x.length);
  }

  return {
    resident: residency,
    decodeStepper: (request) =>
      fusedDecodeStepper(
        { core: get(), residency, pointer: (x) => resident.get(x), threads: pool?.threads ?? 1, parallelMinWork: PARALLEL_MIN_WORK },
        request,
      ),
    matmul,
    matmulABt,
    matmulAtB,
    matmulBackward(x, w, dy, { m, k, n }) {
      return { dx: matmulABt(dy, w, { m, k: n, n: k }), dw: matmulAtB(x, dy, { m: k, k: m, n }) };
    },

    rmsnorm(x, w, dims: NormDims) {
      if (isF64(x)) return ref.rmsnorm(x, w, dims);
      const { rows, dim, eps } = dims;
      checkLength("x", x, rows * dim);
      checkLength("w", w, dim);
      const core = get();
      const call = new Call(core);
      const px = call.in(x);
      const pw = call.in(w);
      const py = call.out(rows * dim);
      const pr = call.out(rows);
      call.run(() =>
        split(rows, rows * dim, (r0, r1) => ({
          name: "rmsnorm",
          args: [px + r0 * dim * 4, pw, py + r0 * dim * 4, pr + r0 * 4, r1 - r0, dim, eps],
        })),
      );
      return { y: call.f32(py, rows * dim), rstd: call.f32(pr, rows) };
    },

    rmsnormBackward(x, w, rstd, dy, dims) {
      if (isF64(x)) return ref.rmsnormBackward(x, w, rstd, dy, dims);
      const { rows, dim } = dims;
      checkLength("x", x, rows * dim);
      checkLength("w", w, dim);
      checkLength("rstd", rstd, rows);
      checkLength("dy", dy, rows * dim);
      const core = get();
      const call = new Call(core);
      const [px, pw, pr, pdy] = [call.in(x), call.in(w), call.in(rstd), call.in(dy)];
      const pdx = call.out(rows * dim);
      const chunks = Math.ceil(rows / NORM_CHUNK);
      const pacc = call.zeros(chunks * dim, Float64Array);
      call.run(() =>
        split(
          rows,
          rows * dim,
          (r0, r1) => ({ name: "rmsnormBackward", args: [px, pw, pr, pdy, pdx, pacc, r0, r1, dim, NORM_CHUNK] }),
          NORM_CHUNK,
        ),
      );
      // the chunks' column sums, added in chunk order
      const acc = call.f64(pacc, chunks * dim);
      const dw = new Float64Array(dim);
      for (let ch = 0; ch < chunks; ch++) for (let j = 0; j < dim; j++) dw[j] += acc[ch * dim + j];
      return { dx: call.f32(pdx, rows * dim), dw: Float32Array.from(dw) };
    },

    rope: (x: Arr, positions: ArrayLike<number>, dims: WasmRopeDims) =>
      isF64(x) && !dims.interleaved ? ref.rope(x, positions, dims) : rotate(x, positions, dims, 1),
    ropeBackward: (dy: Arr, positions: ArrayLike<number>, dims: WasmRopeDims) =>
      isF64(dy) && !dims.interleaved ? ref.ropeBackward(dy, positions, dims) : rotate(dy, positions, dims, -1),

    attention(q, k, v, mask, dims: AttentionDims, keepProbs = true) {
      if (isF64(q)) return ref.attention(q, k, v, mask, dims, keepProbs);
      const { batch: B, seq: T, heads: H, kvHeads: KV, headDim: hd } = dims;
      checkLength("q", q, B * T * H * hd);
      checkLength("k", k, B * T * KV * hd);
      checkLength("v", v, B * T * KV * hd);
      checkLength("attention_mask", mask, B * T);
      if (H % KV !== 0) throw new ValidationError(`heads ${H} is not a multiple of kvHeads ${KV}`, ["kvHeads"]);
      const core = get();
      const call = new Call(core);
      const [pq, pk, pv] = [call.in(q), call.in(k), call.in(v)];
      const pm = call.in(
        Int32Array.from(mask as ArrayLike<number>, (x) => (x === 1 ? 1 : 0)),
        Int32Array,
      );
      const po = call.out(B * T * H * hd);
      const nProbs = keepProbs ? B * H * T * T : 0;
      const pp = call.out(nProbs);
      const ps = Array.from({ length: pool?.threads ?? 1 }, () => call.out(T));
      let t = 0;
      // units of (batch row, kv head): each owns its rows of out and probs
      call.run(() =>
        split(B * KV, B * H * T * T * hd, (u0, u1) => ({
          name: "attention",
          args: [pq, pk, pv, pm, po, pp, keepProbs ? 1 : 0, ps[t++], B, T, H, KV, hd, u0, u1],
        })),
      );
      return { out: call.f32(po, B * T * H * hd), probs: call.f32(pp, nProbs) };
    },

    attentionBackward(q, k, v, probs, dout, dims) {
      if (isF64(q)) return ref.attentionBackward(q, k, v, probs, dout, dims);
      const { batch: B, seq: T, heads: H, kvHeads: KV, headDim: hd } = dims;
      checkLength("q", q, B * T * H * hd);
      checkLength("k", k, B * T * KV * hd);
      checkLength("v", v, B * T * KV * hd);
      checkLength("probs", probs, B * H * T * T);
      checkLength("dout", dout, B * T * H * hd);
      const core = get();
      const call = new Call(core);
      const [pq, pk, pv, pp, pd] = [call.in(q), call.in(k), call.in(v), call.in(probs), call.in(dout)];
      const [dq, dk, dv] = [call.out(q.length), call.out(k.length), call.out(v.length)];
      const ps = Array.from({ length: pool?.threads ?? 1 }, () => call.out(T));
      let t = 0;
      call.run(() =>
        split(B * KV, B * H * T * T * hd, (u0, u1) => ({
          name: "attentionBackward",
          args: [pq, pk, pv, pp, pd, dq, dk, dv, ps[t++], B, T, H, KV, hd, u0, u1],
        })),
      );
      return { dq: call.f32(dq, q.length), dk: call.f32(dk, k.length), dv: call.f32(dv, v.length) };
    },

    attentionDecode(q, kCache, vCache, len, dims) {
      if (isF64(q)) return ref.attentionDecode(q, kCache, vCache, len, dims);
      const { heads: H, kvHeads: KV, headDim: hd } = dims;
      checkLength("q", q, H * hd);
      const n = len * KV * hd;
      if (kCache.length < n) throw new ValidationError(`kCache has ${kCache.length} elements, fewer than ${len} positions`, ["kCache"]);
      if (vCache.length < n) throw new ValidationError(`vCache has ${vCache.length} elements, fewer than ${len} positions`, ["vCache"]);
      const core = get();
      const call = new Call(core);
      const pq = call.in(q);
      // a resident cache is read in place; else only its first `len` positions are copied
      const pk = call.in(resident.has(kCache) ? kCache : kCache.subarray(0, n));
      const pv = call.in(resident.has(vCache) ? vCache : vCache.subarray(0, n));
      const po = call.out(H * hd);
      const ps = Array.from({ length: pool?.threads ?? 1 }, () => call.out(len));
      let t = 0;
      call.run(() =>
        split(KV, len * H * hd * 4, (kv0, kv1) => ({ name: "attentionDecode", args: [pq, pk, pv, po, ps[t++], len, H, KV, hd, kv0, kv1] })),
      );
      return call.f32(po, H * hd);
    },

    swiglu(gate, up) {
      if (isF64(gate)) return ref.swiglu(gate, up);
      checkLength("up", up, gate.length);
      const core = get();
      const call = new Call(core);
      const [pg, pu, py] = [call.in(gate), call.in(up), call.out(gate.length)];
      call.run(() =>
        split(gate.length, gate.length * 8, (i0, i1) => ({ name: "swiglu", args: [pg + i0 * 4, pu + i0 * 4, py + i0 * 4, i1 - i0] }), 4),
      );
      return call.f32(py, gate.length);
    },

    swigluBackward(gate, up, dy) {
      if (isF64(gate)) return ref.swigluBackward(gate, up, dy);
      checkLength("up", up, gate.length);
      checkLength("dy", dy, gate.length);
      const n = gate.length;
      const core = get();
      const call = new Call(core);
      const [pg, pu, pd, dg, du] = [call.in(gate), call.in(up), call.in(dy), call.out(n), call.out(n)];
      call.run(() =>
        split(
          n,
          n * 8,
          (i0, i1) => ({ name: "swigluBackward", args: [pg + i0 * 4, pu + i0 * 4, pd + i0 * 4, dg + i0 * 4, du + i0 * 4, i1 - i0] }),
          4,
        ),
      );
      return { dgate: call.f32(dg, n), dup: call.f32(du, n) };
    },

    logSoftmaxGatherEntropy(logits, targets, dims: VocabDims) {
      if (isF64(logits)) return ref.logSoftmaxGatherEntropy(logits, targets, dims);
      const { rows, vocab } = dims;
      checkLength("logits", logits, rows * vocab);
      checkLength("targets", targets, rows);
      for (let r = 0; r < rows; r++) checkInt("targets", targets[r], 0, vocab);
      const core = get();
      const call = new Call(core);
      const [pz, pt] = [call.in(logits), call.in(i32(targets), Int32Array)];
      const [pl, pe, ps] = [call.out(rows), call.out(rows), call.out(rows)];
      call.run(() =>
        split(rows, rows * vocab * 8, (r0, r1) => ({
          name: "logSoftmaxGatherEntropy",
          args: [pz + r0 * vocab * 4, pt + r0 * 4, pl + r0 * 4, pe + r0 * 4, ps + r0 * 4, r1 - r0, vocab],
        })),
      );
      return { logprob: call.f32(pl, rows), entropy: call.f32(pe, rows), lse: call.f32(ps, rows) };
    },

    logSoftmaxGatherEntropyBackward(logits, targets, lse, entropy, dlogprob, dentropy, dims) {
      if (isF64(logits)) return ref.logSoftmaxGatherEntropyBackward(logits, targets, lse, entropy, dlogprob, dentropy, dims);
      const { rows, vocab } = dims;
      checkLength("logits", logits, rows * vocab);
      for (const [name, a] of [
        ["targets", targets],
        ["lse", lse],
        ["entropy", entropy],
        ["dlogprob", dlogprob],
        ["dentropy", dentropy],
      ] as const)
        checkLength(name, a, rows);
      for (let r = 0; r < rows; r++) checkInt("targets", targets[r], 0, vocab);
      const core = get();
      const call = new Call(core);
      const pz = call.in(logits);
      const pt = call.in(i32(targets), Int32Array);
      const [pl, pe, pgl, pge] = [call.in(lse), call.in(entropy), call.in(dlogprob), call.in(dentropy)];
      const pdz = call.out(rows * vocab);
      call.run(() =>
        split(rows, rows * vocab * 8, (r0, r1) => ({
          name: "logSoftmaxGatherEntropyBackward",
          args: [
            pz + r0 * vocab * 4,
            pt + r0 * 4,
            pl + r0 * 4,
            pe + r0 * 4,
            pgl + r0 * 4,
            pge + r0 * 4,
            pdz + r0 * vocab * 4,
            r1 - r0,
            vocab,
          ],
        })),
      );
      return call.f32(pdz, rows * vocab);
    },

    adamwStep(params: Float32Array, grads: ArrayLike<number>, state: OptimizerState, o: Required<OptimizerOptions>): void {
      const n = params.length;
      checkLength("grads", grads, n);
      checkLength("m", state.m, n);
      checkLength("v", state.v, n);
      state.step += 1;
      // the reference's constants, computed the same way
      const { lr, beta1: b1, beta2: b2, eps, weightDecay: wd } = o;
      const stepSize = lr / (1 - Math.pow(b1, state.step));
      const bc2Sqrt = Math.sqrt(1 - Math.pow(b2, state.step));
      const decay = 1 - lr * wd;
      const core = get();
      const call = new Call(core);
      const [pp, pg, pm, pv] = [call.in(params), call.in(grads), call.in(state.m), call.in(state.v)];
      const c = [b1, 1 - b1, b2, 1 - b2, eps, stepSize, bc2Sqrt, decay];
      call.run(() =>
        split(n, n * 8, (i0, i1) => ({ name: "adamw", args: [pp + i0 * 4, pg + i0 * 4, pm + i0 * 4, pv + i0 * 4, i1 - i0, ...c] })),
      );
      call.into(pp, params);
      call.into(pm, state.m);
      call.into(pv, state.v);
    },
  };
}
