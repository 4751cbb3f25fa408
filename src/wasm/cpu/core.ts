import type { CpuKernelExports } from "./exports.ts";

type Typed = Float32Array | Float64Array | Int32Array;
type Ctor<T extends Typed> = { new (buffer: ArrayBuffer, byteOffset: number, length: number): T; BYTES_PER_ELEMENT: number };

const PAGE = 65536;
const align16 = (x: number) => (x + 15) & ~15;

/**
 * One instance of the CPU kernels and a bump arena over its memory above heapBase. A call resets the
 * arena (`begin`), allocates its inputs, scratch and outputs (`alloc`), and only then takes views (growth
 * detaches earlier views): the façade copies inputs in and outputs out, so nothing outlives a call.
 * The memory is created here and imported by the module, so a later worker pool can share it.
 */
export class CpuCore {
  private readonly base: number;
  private top: number;

  constructor(
    readonly exports: CpuKernelExports,
    readonly memory: WebAssembly.Memory,
  ) {
    this.base = align16(exports.heapBase());
    this.top = this.base;
  }

  /** Starts a call: everything allocated by the previous call is free again. */
  begin(): void {
    this.top = this.base;
  }

  /** `bytes` from the arena, 16-aligned, contents undefined. */
  alloc(bytes: number): number {
    const ptr = this.top;
    this.top = align16(ptr + Math.max(bytes, 0));
    const have = this.memory.buffer.byteLength;
    if (this.top > have) this.memory.grow(Math.ceil((this.top - have) / PAGE));
    return ptr;
  }

  view<T extends Typed>(ctor: Ctor<T>, ptr: number, n: number): T {
    return new ctor(this.memory.buffer as ArrayBuffer, ptr, n);
  }
}
