import type { CpuKernelExports } from "./exports.ts";

type Typed = Float32Array | Float64Array | Int32Array;
type Ctor<T extends Typed> = { new (buffer: ArrayBuffer, byteOffset: number, length: number): T; BYTES_PER_ELEMENT: number };

const PAGE = 65536;
const align16 = (x: number) => (x + 15) & ~15;

/**
 * One instance of the CPU kernels and a bump arena over its memory above heapBase. A call resets the
 * arena (`begin`), allocates its inputs, scratch and outputs (`alloc`), and only then takes views (growth
 * detaches earlier views): the façade copies inputs in and outputs out, so nothing outlives a call.
 * Below the call arena sits a resident region (`reserve`, `releaseTo`): arrays an engine keeps in Wasm
 * memory across calls (weights, a KV cache), freed in stack order.
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
}
