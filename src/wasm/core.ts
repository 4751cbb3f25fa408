import { LightningError } from "../types/errors.ts";
import type { KernelExports } from "./exports.ts";

type Typed = Float32Array | Float64Array | Int32Array | Uint8Array;
type TypedCtor<T extends Typed> = { new (buffer: ArrayBuffer, byteOffset: number, length: number): T; BYTES_PER_ELEMENT: number };

const PAGE = 65536;
const align16 = (x: number) => (x + 15) & ~15;

/**
 * One instance of the Wasm core and the arena over its memory. Memory above `heapBase` belongs to the
 * arena in two regions: "inputs" that a caller allocates and fills directly (they stay until
 * `releaseInputs()`), and the transient region each kernel call uses for copies of outside inputs,
 * scratch and outputs. Outputs are views over Wasm memory, valid until the next kernel call on this core;
 * copy them (`.slice()`) to keep them longer. Growing memory detaches every earlier view (a Wasm rule):
 * call `reserve(bytes)` before allocating inputs whose views you keep.
 */
export class WasmCore {
  readonly memory: WebAssembly.Memory;
  private readonly base: number;
  private inputsTop: number;
  private top: number;

  constructor(readonly exports: KernelExports) {
    this.memory = exports.memory;
    this.base = align16(exports.heapBase());
    this.inputsTop = this.base;
    this.top = this.base;
  }

  /** Makes sure `bytes` more can be allocated without growing (so no view is detached meanwhile). */
  reserve(bytes: number): void {
    this.ensure(this.top + bytes);
  }

  /** An input array inside Wasm memory: fill it, then pass it to a kernel with no copy. */
  inputF32(n: number): Float32Array {
    return this.input(Float32Array, n);
  }
  inputI32(n: number): Int32Array {
    return this.input(Int32Array, n);
  }
  /** Frees every input allocated with `inputF32`/`inputI32` (their views must not be used again). */
  releaseInputs(): void {
    this.inputsTop = this.base;
    this.top = this.base;
  }

  private input<T extends Typed>(ctor: TypedCtor<T>, n: number): T {
    this.top = this.inputsTop; // earlier outputs are given up: inputs stay contiguous below them
    const ptr = this.alloc(n * ctor.BYTES_PER_ELEMENT);
    this.inputsTop = this.top;
    return this.view(ctor, ptr, n);
  }

  /**
   * Starts a kernel call: the transient region begins above the inputs and above any argument that
   * already lives in Wasm memory (e.g. an output of the previous call), so nothing an argument points at
   * is overwritten.
   */
  begin(args: readonly (Typed | null | undefined)[]): void {
    let top = this.inputsTop;
    for (const a of args) {
      if (a && this.inMemory(a)) top = Math.max(top, a.byteOffset + a.byteLength);
    }
    this.top = align16(top);
  }

  /** Bytes from the transient region (16-aligned, zero-initialised is NOT guaranteed). */
  alloc(bytes: number): number {
    const ptr = this.top;
    this.top = align16(ptr + Math.max(bytes, 0));
    this.ensure(this.top);
    return ptr;
  }

  /** Pointer to `x`'s data in Wasm memory: in place when it already lives there, else a fresh copy. */
  place(x: Typed): number {
    if (this.inMemory(x)) return x.byteOffset;
    // (A view detached by growth reads as empty; the wrappers' length checks reject it.)
    const ptr = this.alloc(x.byteLength);
    new Uint8Array(this.memory.buffer, ptr, x.byteLength).set(new Uint8Array(x.buffer, x.byteOffset, x.byteLength));
    return ptr;
  }

  /** Like place, for a value array copied as the given element type (e.g. number[] -> Int32Array). */
  placeAs<T extends Typed>(ctor: TypedCtor<T>, x: ArrayLike<number>): number {
    if (x instanceof (ctor as unknown as typeof Float32Array)) return this.place(x as unknown as Typed);
    const ptr = this.alloc(x.length * ctor.BYTES_PER_ELEMENT);
    (this.view(ctor, ptr, x.length) as unknown as { set(a: ArrayLike<number>): void }).set(x);
    return ptr;
  }

  view<T extends Typed>(ctor: TypedCtor<T>, ptr: number, n: number): T {
    return new ctor(this.memory.buffer as ArrayBuffer, ptr, n);
  }
  f32(ptr: number, n: number): Float32Array {
    return this.view(Float32Array, ptr, n);
  }
  f64(ptr: number, n: number): Float64Array {
    return this.view(Float64Array, ptr, n);
  }
  i32(ptr: number, n: number): Int32Array {
    return this.view(Int32Array, ptr, n);
  }
  u8(ptr: number, n: number): Uint8Array {
    return this.view(Uint8Array, ptr, n);
  }

  private inMemory(x: Typed): boolean {
    return x.buffer === this.memory.buffer;
  }

  private ensure(end: number): void {
    const have = this.memory.buffer.byteLength;
    if (end > have) this.memory.grow(Math.ceil((end - have) / PAGE));
  }
}
