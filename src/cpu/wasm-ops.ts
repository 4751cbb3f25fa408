/**
 * The model ops on the Wasm SIMD kernels (assembly/cpu/, loaded by src/cpu/kernels/), with exactly the
 * signatures of the plain-TS reference (`reference/ops.ts`, `reference/optim.ts`): a `ModelOps` backend
 * (src/model/model-ops.ts) for the reference's forward and backward. Float32 inputs run in Wasm (copied into the
 * instance's memory unless resident, results copied out into fresh arrays; inside an activation scope,
 * `resident.scoped`, results are views over Wasm memory that the scope frees); Float64 inputs
 * (finite-difference checks) go to the reference, which stays the oracle. Accumulation rules, tolerances
 * and the scopes' lifetime rule: src/cpu/README.md.
 */
import { ValidationError } from "../types/errors.ts";
import { CpuCore, cpuCore, GEMM_FORM } from "./kernels/index.ts";
import { CpuPool, type Task } from "./pool.ts";
import { ropeInvFreq } from "../model/config.ts";
import type { DecodeStepper, DecodeStepperRequest, ModelOps } from "../model/model-ops.ts";
import { FusedDecodeStepper } from "./fused-decode.ts";
import * as ref from "../model/reference/ops.ts";
import type { Arr, AttentionDims, MatDims, NormDims, RopeDims, VocabDims } from "../model/reference/ops.ts";
import type { OptimizerOptions, OptimizerState } from "../model/train-types.ts";
import { WasmResidency } from "./residency.ts";
import { gemmTasks, PARALLEL_MIN_WORK, runSplit } from "./split.ts";
import { WasmCall } from "./wasm-call.ts";

/** RoPE dims plus the pair convention: `interleaved` rotates (2i, 2i+1) instead of (i, i + hd/2). */
export interface WasmRopeDims extends RopeDims {
  interleaved?: boolean;
}

function checkLength(name: string, a: ArrayLike<number>, expected: number): void {
  if (a.length !== expected) throw new ValidationError(`${name} has ${a.length} elements, expected ${expected}`, [name]);
}

function checkInt(name: string, value: number, lo: number, hi: number): void {
  if (!(Number.isInteger(value) && value >= lo && value < hi)) throw new ValidationError(`${name} ${value} outside [${lo}, ${hi})`, [name]);
}

const isF64 = (x: Arr): x is Float64Array => x instanceof Float64Array;

function i32(x: ArrayLike<number>): Int32Array {
  return x instanceof Int32Array ? x : Int32Array.from(x as ArrayLike<number>);
}

/**
 * Most bytes an activation scope keeps (above the resident weights, below the 4 GiB Wasm memory's end);
 * results past it are copied out as outside a scope.
 */
const SCOPE_MAX_BYTES = 3 << 29;

/** Rows per dw accumulator block of the RMSNorm backward: fixed, so dw does not depend on the thread count. */
const NORM_CHUNK = 256;

/** The last RoPE frequency table, by its arguments (scaling by identity). */
interface FreqTable {
  headDim: number;
  theta: number;
  scaling: WasmRopeDims["scaling"];
  table: Float64Array;
}

/**
 * The Wasm backend over `target`: an instance (default: the process's shared one, created on first use)
 * or a worker pool. On a pool, large calls are split in fixed ranges (split.ts) — GEMM by columns (or rows
 * when n is small), row-wise kernels by rows, attention by (batch row, kv head) — and every split gives
 * the bits one thread gives. `scopeMaxBytes`: most bytes activation scopes keep [1.5 GiB]; results past it
 * are copied out. Besides the ModelOps ops, RoPE takes the choice of pair convention (`WasmRopeDims`).
 */
export class WasmOps implements ModelOps {
  readonly resident: WasmResidency;
  private readonly pool: CpuPool | null;
  private instance: CpuCore | undefined;
  // decode rotates q and k of every layer per token: the table is kept while its arguments stay
  private lastFreq: FreqTable | null = null;

  constructor(target?: CpuCore | CpuPool, { scopeMaxBytes = SCOPE_MAX_BYTES }: { scopeMaxBytes?: number } = {}) {
    this.pool = target instanceof CpuPool ? target : null;
    this.instance = target instanceof CpuCore ? target : this.pool?.core;
    this.resident = new WasmResidency(() => this.core, scopeMaxBytes);
  }

  /** The instance the calls run on (the pool's on a pool). */
  private get core(): CpuCore {
    return (this.instance ??= cpuCore());
  }

  decodeStepper(request: DecodeStepperRequest): DecodeStepper | null {
    const host = {
      core: this.core,
      residency: this.resident,
      pointer: (x: ArrayLike<number>) => this.resident.pointers.get(x),
      threads: this.pool?.threads ?? 1,
      parallelMinWork: PARALLEL_MIN_WORK,
    };
    return FusedDecodeStepper.create(host, request);
  }

  matmul(a: Arr, b: Arr, d: MatDims): Arr {
    return isF64(a) ? ref.matmul(a, b, d) : this.gemm(GEMM_FORM.AB, a, b, d, d.m * d.k, d.k * d.n);
  }

  matmulABt(a: Arr, b: Arr, d: MatDims): Arr {
    return isF64(a) ? ref.matmulABt(a, b, d) : this.gemm(GEMM_FORM.ABT, a, b, d, d.m * d.k, d.n * d.k);
  }

  matmulAtB(a: Arr, b: Arr, d: MatDims): Arr {
    return isF64(a) ? ref.matmulAtB(a, b, d) : this.gemm(GEMM_FORM.ATB, a, b, d, d.k * d.m, d.k * d.n);
  }

  matmulBackward(x: Arr, w: Arr, dy: Arr, { m, k, n }: MatDims): { dx: Arr; dw: Arr } {
    return { dx: this.matmulABt(dy, w, { m, k: n, n: k }), dw: this.matmulAtB(x, dy, { m: k, k: m, n }) };
  }

  rmsnorm(x: Arr, w: Arr, dims: NormDims): { y: Arr; rstd: Arr } {
    if (isF64(x)) return ref.rmsnorm(x, w, dims);
    const { rows, dim, eps } = dims;
    checkLength("x", x, rows * dim);
    checkLength("w", w, dim);
    const call = this.call();
    const py = call.out(rows * dim);
    const pr = call.out(rows);
    const px = call.in(x);
    const pw = call.in(w);
    call.run(() =>
      this.split(rows, rows * dim, (r0, r1) => ({
        name: "rmsnorm",
        args: [px + r0 * dim * 4, pw, py + r0 * dim * 4, pr + r0 * 4, r1 - r0, dim, eps],
      })),
    );
    return { y: call.f32(py, rows * dim), rstd: call.f32(pr, rows) };
  }

  rmsnormBackward(x: Arr, w: Arr, rstd: Arr, dy: Arr, dims: Omit<NormDims, "eps">): { dx: Arr; dw: Arr } {
    if (isF64(x)) return ref.rmsnormBackward(x, w, rstd, dy, dims);
    const { rows, dim } = dims;
    checkLength("x", x, rows * dim);
    checkLength("w", w, dim);
    checkLength("rstd", rstd, rows);
    checkLength("dy", dy, rows * dim);
    const call = this.call();
    const pdx = call.out(rows * dim);
    const [px, pw, pr, pdy] = [call.in(x), call.in(w), call.in(rstd), call.in(dy)];
    const chunks = Math.ceil(rows / NORM_CHUNK);
    const pacc = call.zeros(chunks * dim, Float64Array);
    call.run(() =>
      this.split(
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
  }

  rope(x: Arr, positions: ArrayLike<number>, dims: WasmRopeDims): Arr {
    return isF64(x) && !dims.interleaved ? ref.rope(x, positions, dims) : this.rotate(x, positions, dims, 1);
  }

  ropeBackward(dy: Arr, positions: ArrayLike<number>, dims: WasmRopeDims): Arr {
    return isF64(dy) && !dims.interleaved ? ref.ropeBackward(dy, positions, dims) : this.rotate(dy, positions, dims, -1);
  }

  attention(q: Arr, k: Arr, v: Arr, mask: ArrayLike<number>, dims: AttentionDims, keepProbs = true): { out: Arr; probs: Arr } {
    if (isF64(q)) return ref.attention(q, k, v, mask, dims, keepProbs);
    const { batch: B, seq: T, heads: H, kvHeads: KV, headDim: hd } = dims;
    checkLength("q", q, B * T * H * hd);
    checkLength("k", k, B * T * KV * hd);
    checkLength("v", v, B * T * KV * hd);
    checkLength("attention_mask", mask, B * T);
    if (H % KV !== 0) throw new ValidationError(`heads ${H} is not a multiple of kvHeads ${KV}`, ["kvHeads"]);
    const call = this.call();
    const po = call.out(B * T * H * hd);
    const nProbs = keepProbs ? B * H * T * T : 0;
    const pp = call.out(nProbs);
    const [pq, pk, pv] = [call.in(q), call.in(k), call.in(v)];
    const pm = call.in(
      Int32Array.from(mask as ArrayLike<number>, (x) => (x === 1 ? 1 : 0)),
      Int32Array,
    );
    const ps = this.threadScratch(call, T);
    let t = 0;
    // units of (batch row, kv head): each owns its rows of out and probs
    call.run(() =>
      this.split(B * KV, B * H * T * T * hd, (u0, u1) => ({
        name: "attention",
        args: [pq, pk, pv, pm, po, pp, keepProbs ? 1 : 0, ps[t++], B, T, H, KV, hd, u0, u1],
      })),
    );
    return { out: call.f32(po, B * T * H * hd), probs: call.f32(pp, nProbs) };
  }

  attentionBackward(q: Arr, k: Arr, v: Arr, probs: Arr, dout: Arr, dims: AttentionDims): { dq: Arr; dk: Arr; dv: Arr } {
    if (isF64(q)) return ref.attentionBackward(q, k, v, probs, dout, dims);
    const { batch: B, seq: T, heads: H, kvHeads: KV, headDim: hd } = dims;
    checkLength("q", q, B * T * H * hd);
    checkLength("k", k, B * T * KV * hd);
    checkLength("v", v, B * T * KV * hd);
    checkLength("probs", probs, B * H * T * T);
    checkLength("dout", dout, B * T * H * hd);
    const call = this.call();
    const [dq, dk, dv] = [call.out(q.length), call.out(k.length), call.out(v.length)];
    const [pq, pk, pv, pp, pd] = [call.in(q), call.in(k), call.in(v), call.in(probs), call.in(dout)];
    const ps = this.threadScratch(call, T);
    let t = 0;
    call.run(() =>
      this.split(B * KV, B * H * T * T * hd, (u0, u1) => ({
        name: "attentionBackward",
        args: [pq, pk, pv, pp, pd, dq, dk, dv, ps[t++], B, T, H, KV, hd, u0, u1],
      })),
    );
    return { dq: call.f32(dq, q.length), dk: call.f32(dk, k.length), dv: call.f32(dv, v.length) };
  }

  attentionDecode(q: Arr, kCache: Arr, vCache: Arr, len: number, dims: Omit<AttentionDims, "batch" | "seq">): Arr {
    if (isF64(q)) return ref.attentionDecode(q, kCache, vCache, len, dims);
    const { heads: H, kvHeads: KV, headDim: hd } = dims;
    checkLength("q", q, H * hd);
    const n = len * KV * hd;
    if (kCache.length < n) throw new ValidationError(`kCache has ${kCache.length} elements, fewer than ${len} positions`, ["kCache"]);
    if (vCache.length < n) throw new ValidationError(`vCache has ${vCache.length} elements, fewer than ${len} positions`, ["vCache"]);
    const call = this.call();
    const po = call.out(H * hd);
    const pq = call.in(q);
    // a resident cache is read in place; else only its first `len` positions are copied
    const resident = this.resident.pointers;
    const pk = call.in(resident.has(kCache) ? kCache : kCache.subarray(0, n));
    const pv = call.in(resident.has(vCache) ? vCache : vCache.subarray(0, n));
    const ps = this.threadScratch(call, len);
    let t = 0;
    call.run(() =>
      this.split(KV, len * H * hd * 4, (kv0, kv1) => ({
        name: "attentionDecode",
        args: [pq, pk, pv, po, ps[t++], len, H, KV, hd, kv0, kv1],
      })),
    );
    return call.f32(po, H * hd);
  }

  swiglu(gate: Arr, up: Arr): Arr {
    if (isF64(gate)) return ref.swiglu(gate, up);
    checkLength("up", up, gate.length);
    const call = this.call();
    const py = call.out(gate.length);
    const [pg, pu] = [call.in(gate), call.in(up)];
    call.run(() =>
      this.split(gate.length, gate.length * 8, (i0, i1) => ({ name: "swiglu", args: [pg + i0 * 4, pu + i0 * 4, py + i0 * 4, i1 - i0] }), 4),
    );
    return call.f32(py, gate.length);
  }

  swigluBackward(gate: Arr, up: Arr, dy: Arr): { dgate: Arr; dup: Arr } {
    if (isF64(gate)) return ref.swigluBackward(gate, up, dy);
    checkLength("up", up, gate.length);
    checkLength("dy", dy, gate.length);
    const n = gate.length;
    const call = this.call();
    const [dg, du] = [call.out(n), call.out(n)];
    const [pg, pu, pd] = [call.in(gate), call.in(up), call.in(dy)];
    call.run(() =>
      this.split(
        n,
        n * 8,
        (i0, i1) => ({ name: "swigluBackward", args: [pg + i0 * 4, pu + i0 * 4, pd + i0 * 4, dg + i0 * 4, du + i0 * 4, i1 - i0] }),
        4,
      ),
    );
    return { dgate: call.f32(dg, n), dup: call.f32(du, n) };
  }

  logSoftmaxGatherEntropy(logits: Arr, targets: ArrayLike<number>, dims: VocabDims): { logprob: Arr; entropy: Arr; lse: Arr } {
    if (isF64(logits)) return ref.logSoftmaxGatherEntropy(logits, targets, dims);
    const { rows, vocab } = dims;
    checkLength("logits", logits, rows * vocab);
    checkLength("targets", targets, rows);
    for (let r = 0; r < rows; r++) checkInt("targets", targets[r], 0, vocab);
    const call = this.call();
    const [pl, pe, ps] = [call.out(rows), call.out(rows), call.out(rows)];
    const [pz, pt] = [call.in(logits), call.in(i32(targets), Int32Array)];
    call.run(() =>
      this.split(rows, rows * vocab * 8, (r0, r1) => ({
        name: "logSoftmaxGatherEntropy",
        args: [pz + r0 * vocab * 4, pt + r0 * 4, pl + r0 * 4, pe + r0 * 4, ps + r0 * 4, r1 - r0, vocab],
      })),
    );
    return { logprob: call.f32(pl, rows), entropy: call.f32(pe, rows), lse: call.f32(ps, rows) };
  }

  logSoftmaxGatherEntropyBackward(
    logits: Arr,
    targets: ArrayLike<number>,
    lse: Arr,
    entropy: Arr,
    dlogprob: Arr,
    dentropy: Arr,
    dims: VocabDims,
  ): Arr {
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
    const call = this.call();
    const pdz = call.out(rows * vocab);
    const pz = call.in(logits);
    const pt = call.in(i32(targets), Int32Array);
    const [pl, pe, pgl, pge] = [call.in(lse), call.in(entropy), call.in(dlogprob), call.in(dentropy)];
    call.run(() =>
      this.split(rows, rows * vocab * 8, (r0, r1) => ({
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
  }

  // The light ops run here only on arrays already in Wasm memory inside a scope (where going out to
  // TypeScript would cost a copy each way); elsewhere (decode's one-row calls) the reference is cheaper
  // than a kernel call. Both give the same bits.
  add(a: Arr, b: Arr): Arr {
    if (isF64(a) || !this.resident.inScope) return ref.add(a, b);
    checkLength("b", b, a.length);
    const call = this.call();
    const py = call.out(a.length);
    const [pa, pb] = [call.in(a), call.in(b)];
    call.run(() => this.core.exports.addF32(pa, pb, py, a.length));
    return call.f32(py, a.length);
  }

  // in place only on a scope's results: a pinned array's JS copy would go stale
  addInPlace(a: Arr, b: Arr): void {
    const pa = this.resident.scope.ptrs.get(a);
    if (pa === undefined || isF64(b)) {
      ref.addInPlace(a, b);
      return;
    }
    checkLength("b", b, a.length);
    const call = this.call();
    const pb = call.in(b);
    call.run(() => this.core.exports.addF32(pa, pb, pa, a.length));
  }

  addBiasInPlace(x: Arr, bias: Arr): void {
    const px = this.resident.scope.ptrs.get(x);
    if (px === undefined || isF64(bias)) {
      ref.addBiasInPlace(x, bias);
      return;
    }
    const n = bias.length;
    if (x.length % n !== 0) throw new ValidationError(`x has ${x.length} elements, not a multiple of the bias's ${n}`, ["x"]);
    const call = this.call();
    const pb = call.in(bias);
    call.run(() => this.core.exports.addBias(px, pb, x.length / n, n));
  }

  columnSums(x: Arr, rows: number, cols: number): Arr {
    const px = this.resident.scope.ptrs.get(x);
    if (px === undefined) return ref.columnSums(x, rows, cols);
    checkLength("x", x, rows * cols);
    const call = this.call();
    const py = call.out(cols);
    const pacc = call.temp(cols, Float64Array);
    call.run(() => this.core.exports.columnSums(px, py, pacc, rows, cols));
    return call.f32(py, cols);
  }

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
    const call = this.call();
    const [pp, pg, pm, pv] = [call.in(params), call.in(grads), call.in(state.m), call.in(state.v)];
    const c = [b1, 1 - b1, b2, 1 - b2, eps, stepSize, bc2Sqrt, decay];
    call.run(() =>
      this.split(n, n * 8, (i0, i1) => ({ name: "adamw", args: [pp + i0 * 4, pg + i0 * 4, pm + i0 * 4, pv + i0 * 4, i1 - i0, ...c] })),
    );
    call.into(pp, params);
    call.into(pm, state.m);
    call.into(pv, state.v);
  }

  /** A kernel call on this backend's instance (wasm-call.ts). */
  private call(): WasmCall {
    return new WasmCall(this.core, this.resident);
  }

  /** One scratch region of `n` floats per thread that a split call may use. */
  private threadScratch(call: WasmCall, n: number): number[] {
    return Array.from({ length: this.pool?.threads ?? 1 }, () => call.temp(n));
  }

  /** task(i0, i1) over [0, count), in fixed ranges on the pool when `work` pays for it (split.ts). */
  private split(count: number, work: number, task: (i0: number, i1: number) => Task, align = 1): void {
    runSplit(this.core, this.pool, count, work, task, align);
  }

  private gemm(form: number, a: Arr, b: Arr, { m, k, n }: MatDims, aLen: number, bLen: number): Float32Array {
    checkLength("a", a, aLen);
    checkLength("b", b, bLen);
    const core = this.core;
    const pool = this.pool;
    const call = this.call();
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

  private invFreq(headDim: number, theta: number, scaling: WasmRopeDims["scaling"]): Float64Array {
    let last = this.lastFreq;
    if (!last || last.headDim !== headDim || last.theta !== theta || last.scaling !== scaling)
      last = this.lastFreq = { headDim, theta, scaling, table: ropeInvFreq(headDim, theta, scaling) };
    return last.table;
  }

  private rotate(x: Arr, positions: ArrayLike<number>, dims: WasmRopeDims, sign: 1 | -1): Arr {
    const { rows, heads, headDim, theta, scaling, interleaved } = dims;
    checkLength("x", x, rows * heads * headDim);
    checkLength("positions", positions, rows);
    const call = this.call();
    const py = call.out(x.length);
    const px = call.in(x);
    const pp = call.in(i32(positions), Int32Array);
    const pf = call.in(this.invFreq(headDim, theta, scaling), Float64Array);
    const rowBytes = heads * headDim * 4;
    call.run(() =>
      this.split(rows, x.length, (r0, r1) => ({
        name: "rope",
        args: [px + r0 * rowBytes, py + r0 * rowBytes, pp + r0 * 4, pf, r1 - r0, heads, headDim, sign, interleaved ? 1 : 0],
      })),
    );
    return call.f32(py, x.length);
  }
}
