/**
 * One kernel call of the Wasm ops (wasm-ops.ts): allocate every input and output first (growth detaches
 * views), then copy inputs in, run, and copy outputs out. Inside an activation scope, outputs allocated
 * before any temporary (an input copy, scratch) stay in Wasm memory after the call and are returned as
 * views: so each op allocates its outputs first.
 */
import type { CpuCore } from "./kernels/index.ts";
import type { WasmResidency } from "./residency.ts";

type Ctor = Float32ArrayConstructor | Float64ArrayConstructor | Int32ArrayConstructor;

export class WasmCall {
  /** [pointer, contents (null: zeros), element type, length] */
  private readonly fills: [number, ArrayLike<number> | null, Ctor, number][] = [];
  /** End of the outputs kept so far (0: none). */
  private keptEnd = 0;
  /** Whether the next output may still be kept: inside a scope, before any temporary, within budget. */
  private keeping: boolean;
  constructor(
    private readonly core: CpuCore,
    private readonly residency: WasmResidency,
  ) {
    core.begin();
    this.keeping = residency.scope.marks.length > 0;
  }
  /** A resident array's pointer, else a fresh copy's. */
  in(x: ArrayLike<number>, ctor: Ctor = Float32Array): number {
    const at = this.residency.pointers.get(x) ?? this.residency.scope.ptrs.get(x);
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
      const scope = this.residency.scope;
      this.keeping = end - scope.marks[0] <= scope.maxBytes;
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
    const scope = this.residency.scope;
    scope.ptrs.set(view, ptr);
    scope.kept.push(view);
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
