import type { CpuKernelExports } from "./exports.ts";

type Typed = Float32Array | Float64Array | Int32Array;
type Ctor<T extends Typed> = { new (buffer: ArrayBuffer, byteOffset: number, length: number): T; BYTES_PER_ELEMENT: number };

const PAGE = 65536;
const align16 = (x: number) => (x + 15) & ~15;
/** Results up to this size share slabs of SLAB_BYTES (see `read`). */
const SMALL_BYTES = 2048;
const SLAB_BYTES = 32768;

/**
 * One instance of the CPU kernels and a bump arena over its memory above heapBase. A call resets the
 * arena (`begin`), allocates its inputs, scratch and outputs (`alloc`), and only then takes views (growth
 * detaches earlier views over a plain memory). Below the call arena sits a resident region (`reserve`,
 * `releaseTo`): arrays an engine keeps in Wasm memory across calls (weights, a KV cache, a scope's
 * activations: `retain` keeps the start of a call's arena), freed in stack order.
 * The memory is created here and imported by the module, so a worker pool can share it.
 */
export class CpuCore {
  private readonly heap: number;
  private base: number;
  private top: number;

  constructor(
    readonly exports: CpuKernelExports,
    readonly memory: WebAssembly.Memory,
  ) {
    this.heap = align16(exports.heapBase());
    this.base = this.heap;
    this.top = this.base;
  }

  /** Where the resident region ends now: `releaseTo(mark)` frees everything reserved after it. */
  get mark(): number {
    return this.base;
  }

  /** `bytes` of resident memory (16-aligned, contents undefined), kept until released; never during a call. */
  reserve(bytes: number): number {
    const ptr = this.base;
    this.base = align16(ptr + Math.max(bytes, 0));
    this.top = this.base;
    this.grow(this.base);
    return ptr;
  }

  /** Frees the resident memory reserved after `mark` (all of it without one). */
  releaseTo(mark = this.heap): void {
    if (mark < this.heap || mark > this.base) throw new RangeError(`resident mark ${mark} outside [${this.heap}, ${this.base}]`);
    this.base = mark;
    this.top = mark;
  }

  /** Makes the current call's arena below `end` resident (results kept past the call, freed by `releaseTo`). */
  retain(end: number): void {
    const at = align16(end);
    if (at < this.base || at > this.top) throw new RangeError(`retain end ${end} outside the call arena [${this.base}, ${this.top}]`);
    this.base = at;
  }

  /** Starts a call: everything allocated by the previous call is free again. */
  begin(): void {
    this.top = this.base;
  }

  /** `bytes` from the arena, 16-aligned, contents undefined. */
  alloc(bytes: number): number {
    const ptr = this.top;
    this.top = align16(ptr + Math.max(bytes, 0));
    this.grow(this.top);
    return ptr;
  }

  private grow(end: number): void {
    const have = this.memory.buffer.byteLength;
    if (end > have) this.memory.grow(Math.ceil((end - have) / PAGE));
  }

  view<T extends Typed>(ctor: Ctor<T>, ptr: number, n: number): T {
    return new ctor(this.memory.buffer as ArrayBuffer, ptr, n);
  }

  // Whole-memory views, one per element type, remade when the buffer changes (growth, here or by another
  // thread): copies in and out then make no view per call (per-call views dominated small decode calls).
  private buffer: ArrayBufferLike | null = null;
  private readonly whole = new Map<Ctor<Typed>, Typed>();

  private all<T extends Typed>(ctor: Ctor<T>): T {
    const buffer = this.memory.buffer;
    if (buffer !== this.buffer) {
      this.buffer = buffer;
      this.whole.clear();
    }
    let w = this.whole.get(ctor);
    if (!w) {
      w = new ctor(buffer as ArrayBuffer, 0, buffer.byteLength / ctor.BYTES_PER_ELEMENT);
      this.whole.set(ctor, w);
    }
    return w as T;
  }

  // Small results are carved from a shared slab: V8 gives a typed array of more than 64 bytes a backing
  // store of its own (~1 us to create, most of a decode step's small calls), a view on a slab ~30 ns. A
  // slab lives as long as any result carved from it, so only results up to SMALL_BYTES come from one.
  private slab = new ArrayBuffer(SLAB_BYTES);
  private slabAt = 0;

  /** A fresh array holding n elements at ptr (aligned to the element size); its contents are its own. */
  read<T extends Typed>(ctor: Ctor<T>, ptr: number, n: number): T {
    const at = ptr / ctor.BYTES_PER_ELEMENT;
    const bytes = n * ctor.BYTES_PER_ELEMENT;
    if (bytes > SMALL_BYTES) return this.all(ctor).slice(at, at + n) as T;
    if (this.slabAt + bytes > SLAB_BYTES) {
      this.slab = new ArrayBuffer(SLAB_BYTES);
      this.slabAt = 0;
    }
    const out = new ctor(this.slab, this.slabAt, n);
    this.slabAt = align16(this.slabAt + bytes);
    out.set(this.all(ctor).subarray(at, at + n));
    return out;
  }

  /** Copies x to ptr as elements of `ctor` (aligned to the element size). */
  write(ctor: Ctor<Typed>, ptr: number, x: ArrayLike<number>): void {
    this.all(ctor).set(x, ptr / ctor.BYTES_PER_ELEMENT);
  }

  /** Copies `bytes` (a multiple of 4) from src to dst; the two ranges may overlap. */
  move(dst: number, src: number, bytes: number): void {
    this.all(Float32Array).copyWithin(dst / 4, src / 4, (src + bytes) / 4);
  }

  /** Zeroes n elements of `ctor` at ptr. */
  zero(ctor: Ctor<Typed>, ptr: number, n: number): void {
    const at = ptr / ctor.BYTES_PER_ELEMENT;
    this.all(ctor).fill(0, at, at + n);
  }
}
