/**
 * The model ops on the Wasm SIMD kernels (assembly/cpu/, loaded by src/cpu/kernels/), with exactly the
 * signatures of the plain-TS reference (`reference/ops.ts`, `reference/optim.ts`): a `ModelOps` backend
 * (src/model/model-ops.ts) for the reference's forward and backward. Float32 inputs run in Wasm (copied into the
 * instance's memory unless resident, results copied out into fresh arrays; inside an activation scope,
 * `resident.scoped`, results are views over Wasm memory that the scope frees); Float64 inputs
 * (finite-difference checks) go to the reference, which stays the oracle. Accumulation rules, tolerances
 * and the scopes' lifetime rule: src/cpu/README.md.
 */
import { LightningError, ValidationError } from "../types/errors.ts";
import { CpuCore, cpuCore, GEMM_FORM } from "./kernels/index.ts";
import { CpuPool, type Task } from "./pool.ts";
import { ropeInvFreq } from "../model/config.ts";
import type { ModelOps, Residency } from "../model/model-ops.ts";
import { fusedDecodeStepper } from "./fused-decode.ts";
import * as ref from "../model/reference/ops.ts";
import type { Arr, AttentionDims, MatDims, NormDims, RopeDims, VocabDims } from "../model/reference/ops.ts";
import type { OptimizerOptions, OptimizerState } from "../model/train-types.ts";

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

/** The open activation scopes of one backend (`Residency.scoped`): kept results, innermost scope last. */
interface ScopeState {
  /** Core marks where each open scope began. */
  marks: number[];
  /** Most bytes the open scopes keep in all. */
  maxBytes: number;
  /** Results kept by the open scopes, in allocation order. */
  kept: Float32Array[];
  /** Their pointers. */
  ptrs: Map<ArrayLike<number>, number>;
}

/**
 * One kernel call: allocate every input and output first (growth detaches views), then copy inputs in,
 * run, and copy outputs out. Inside an activation scope, outputs allocated before any temporary (an input
 * copy, scratch) stay in Wasm memory after the call and are returned as views: so each op allocates its
 * outputs first.
 */
class CallBase {
  /** [pointer, contents (null: zeros), element type, length] */
  private readonly fills: [number, ArrayLike<number> | null, Ctor, number][] = [];
  /** End of the outputs kept so far (0: none). */
  private keptEnd = 0;
  /** Whether the next output may still be kept: inside a scope, before any temporary, within budget. */
  private keeping: boolean;
  constructor(
    private readonly core: CpuCore,
    private readonly resident: ReadonlyMap<ArrayLike<number>, number>,
    private readonly scope: ScopeState | null,
  ) {
    core.begin();
    this.keeping = scope !== null && scope.marks.length > 0;
  }
  /** A resident array's pointer, else a fresh copy's. */
  in(x: ArrayLike<number>, ctor: Ctor = Float32Array): number {
    const at = this.resident.get(x) ?? this.scope?.ptrs.get(x);
    if (at !== undefined) return at;
    const ptr = this.temp(x.length, ctor);
    this.fills.push([ptr, x, ctor, x.length]);
    return ptr;
  }
  /** Room for a Float32 result: kept past the call inside a scope (while within its budget). */
  out(n: number): number {
    const ptr = this.core.alloc(n * 4);
    if (this.keeping) {
      const end = ptr + n * 4;
      this.keeping = end - this.scope!.marks[0] <= this.scope!.maxBytes;
      if (this.keeping) this.keptEnd = end;
    }
    return ptr;
  }
  /** Memory for this call only (scratch, f64 accumulators). */
  temp(n: number, ctor: Ctor = Float32Array): number {
    this.keeping = false;
    return this.core.alloc(n * ctor.BYTES_PER_ELEMENT);
  }
  zeros(n: number, ctor: Ctor = Float32Array): number {
    const ptr = this.temp(n, ctor);
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
  /** The Float32 result at ptr: a view kept by the open scope if it was kept, else a fresh copy. */
  f32(ptr: number, n: number): Float32Array {
    if (ptr + n * 4 > this.keptEnd) return this.core.read(Float32Array, ptr, n);
    // the call arena up to the kept outputs becomes the scope's (a no-op after the first result)
    this.core.retain(this.keptEnd);
    const view = this.core.view(Float32Array, ptr, n);
    this.scope!.ptrs.set(view, ptr);
    this.scope!.kept.push(view);
    return view;
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

/**
 * Most bytes an activation scope keeps (above the resident weights, below the 4 GiB Wasm memory's end);
 * results past it are copied out as outside a scope.
 */
const SCOPE_MAX_BYTES = 3 << 29;

/** Rows per dw accumulator block of the RMSNorm backward: fixed, so dw does not depend on the thread count. */
const NORM_CHUNK = 256;

/**
 * The Wasm backend over `target`: an instance (default: the process's shared one, created on first use)
 * or a worker pool. On a pool, large calls are split in fixed ranges — GEMM by columns (or rows when n is
 * small), row-wise kernels by
 * rows, attention by (batch row, kv head) — and every split gives the bits one thread gives.
 * `scopeMaxBytes`: most bytes activation scopes keep [1.5 GiB]; results past it are copied out.
 */
export function wasmOps(target?: CpuCore | CpuPool, { scopeMaxBytes = SCOPE_MAX_BYTES }: { scopeMaxBytes?: number } = {}): WasmModelOps {
  const pool = target instanceof CpuPool ? target : null;
  let c = target instanceof CpuCore ? target : pool?.core;
  const get = () => (c ??= cpuCore());
  // resident arrays (by identity) and their pointers, in pinning order
  const resident = new Map<ArrayLike<number>, number>();
  const pinned: [Float32Array, number, number][] = [];
  const scope: ScopeState = { marks: [], maxBytes: scopeMaxBytes, kept: [], ptrs: new Map() };
  class Call extends CallBase {
    constructor(core: CpuCore) {
      super(core, resident, scope);
    }
  }
  // a view over a shared memory survives growth; over a plain one growth detaches it, so results stay only
  // where the memory is shared
  const canKeep = () => typeof SharedArrayBuffer !== "undefined" && get().memory.buffer instanceof SharedArrayBuffer;
  const noScope = (what: string) => {
    if (scope.marks.length > 0) throw new LightningError(`resident.${what} inside an activation scope (it would free the scope's results)`);
  };
  const residentBytes = () => (pinned.length === 0 ? 0 : get().mark - pinned[0][2]);
  const residency: Residency = {
    pin(arrays) {
      noScope("pin");
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
      noScope("release");
      const core = get();
      core.releaseTo(pinned[mark][2]);
      for (const [x] of pinned.splice(mark)) resident.delete(x);
    },
    scoped<T>(fn: () => T): T {
      if (!canKeep()) return fn();
      const core = get();
      const start = core.mark;
      const first = scope.kept.length;
      scope.marks.push(start);
      try {
        return fn();
      } finally {
        scope.marks.pop();
        for (const x of scope.kept.splice(first)) scope.ptrs.delete(x);
        core.releaseTo(start);
      }
    },
    scopedKeep<A extends Arr>(fn: () => A): A {
      if (!canKeep()) return fn();
      // outside a scope there is nothing to move the result into: a copy
      if (scope.marks.length === 0) return residency.scoped(() => copyIfKept(fn()));
      const core = get();
      const start = core.mark;
      const first = scope.kept.length;
      scope.marks.push(start);
      let r: A | undefined;
      let at: number | undefined;
      try {
        r = fn();
        at = scope.ptrs.get(r);
      } finally {
        scope.marks.pop();
        for (const x of scope.kept.splice(first)) scope.ptrs.delete(x);
        core.releaseTo(start);
      }
      if (at === undefined) return r;
      // move it down to where this scope began (the regions may overlap: copyWithin allows that)
      core.move(start, at, r.length * 4);
      const ptr = core.reserve(r.length * 4);
      const view = core.view(Float32Array, ptr, r.length);
      scope.ptrs.set(view, ptr);
      scope.kept.push(view);
      return view as A;
    },
  };
  const copyIfKept = <A extends Arr>(x: A): A => (scope.ptrs.has(x) ? (x.slice() as A) : x);

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
    const py = call.out(m * n);
    const pa = call.in(a);
    const pb = call.in(b);
    const threads = pool && m * n * k >= PARALLEL_MIN_WORK ? pool.threads : 1;
    const scratch = Array.from({ length: threads }, () => call.temp(core.exports.gemmScratchBytes() / 4));
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
    const py = call.out(x.length);
    const px = call.in(x);
    const pp = call.in(i32(positions), Int32Array);
    const pf = call.in(invFreq(headDim, theta, scaling), Float64Array);
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
      const py = call.out(rows * dim);
      const pr = call.out(rows);
      const px = call.in(x);
      const pw = call.in(w);
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
      const pdx = call.out(rows * dim);
      const [px, pw, pr, pdy] = [call.in(x), call.in(w), call.in(rstd), call.in(dy)];
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
      const po = call.out(B * T * H * hd);
      const nProbs = keepProbs ? B * H * T * T : 0;
      const pp = call.out(nProbs);
      const [pq, pk, pv] = [call.in(q), call.in(k), call.in(v)];
      const pm = call.in(
        Int32Array.from(mask as ArrayLike<number>, (x) => (x === 1 ? 1 : 0)),
        Int32Array,
      );
      const ps = Array.from({ length: pool?.threads ?? 1 }, () => call.temp(T));
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
      const [dq, dk, dv] = [call.out(q.length), call.out(k.length), call.out(v.length)];
      const [pq, pk, pv, pp, pd] = [call.in(q), call.in(k), call.in(v), call.in(probs), call.in(dout)];
      const ps = Array.from({ length: pool?.threads ?? 1 }, () => call.temp(T));
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
      const po = call.out(H * hd);
      const pq = call.in(q);
      // a resident cache is read in place; else only its first `len` positions are copied
      const pk = call.in(resident.has(kCache) ? kCache : kCache.subarray(0, n));
      const pv = call.in(resident.has(vCache) ? vCache : vCache.subarray(0, n));
      const ps = Array.from({ length: pool?.threads ?? 1 }, () => call.temp(len));
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
      const py = call.out(gate.length);
      const [pg, pu] = [call.in(gate), call.in(up)];
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
      const [dg, du] = [call.out(n), call.out(n)];
      const [pg, pu, pd] = [call.in(gate), call.in(up), call.in(dy)];
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
      const [pl, pe, ps] = [call.out(rows), call.out(rows), call.out(rows)];
      const [pz, pt] = [call.in(logits), call.in(i32(targets), Int32Array)];
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
      const pdz = call.out(rows * vocab);
      const pz = call.in(logits);
      const pt = call.in(i32(targets), Int32Array);
      const [pl, pe, pgl, pge] = [call.in(lse), call.in(entropy), call.in(dlogprob), call.in(dentropy)];
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

    // The light ops run here only on arrays already in Wasm memory inside a scope (where going out to
    // TypeScript would cost a copy each way); elsewhere (decode's one-row calls) the reference is cheaper
    // than a kernel call. Both give the same bits.
    add(a, b) {
      if (isF64(a) || scope.marks.length === 0) return ref.add(a, b);
      checkLength("b", b, a.length);
      const core = get();
      const call = new Call(core);
      const py = call.out(a.length);
      const [pa, pb] = [call.in(a), call.in(b)];
      call.run(() => core.exports.addF32(pa, pb, py, a.length));
      return call.f32(py, a.length);
    },

    // in place only on a scope's results: a pinned array's JS copy would go stale
    addInPlace(a, b) {
      const pa = scope.ptrs.get(a);
      if (pa === undefined || isF64(b)) return ref.addInPlace(a, b);
      checkLength("b", b, a.length);
      const core = get();
      const call = new Call(core);
      const pb = call.in(b);
      call.run(() => core.exports.addF32(pa, pb, pa, a.length));
    },

    addBiasInPlace(x, bias) {
      const px = scope.ptrs.get(x);
      if (px === undefined || isF64(bias)) return ref.addBiasInPlace(x, bias);
      const n = bias.length;
      if (x.length % n !== 0) throw new ValidationError(`x has ${x.length} elements, not a multiple of the bias's ${n}`, ["x"]);
      const core = get();
      const call = new Call(core);
      const pb = call.in(bias);
      call.run(() => core.exports.addBias(px, pb, x.length / n, n));
    },

    columnSums(x, rows, cols) {
      const px = scope.ptrs.get(x);
      if (px === undefined) return ref.columnSums(x, rows, cols);
      checkLength("x", x, rows * cols);
      const core = get();
      const call = new Call(core);
      const py = call.out(cols);
      const pacc = call.temp(cols, Float64Array);
      call.run(() => core.exports.columnSums(px, py, pacc, rows, cols));
      return call.f32(py, cols);
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
