/**
 * The Wasm ops' `Residency` (src/model/model-ops.ts): arrays pinned in the instance's memory by identity,
 * and the activation scopes whose results stay there as views. The lifetime rules: src/cpu/README.md.
 */
import { LightningError, ValidationError } from "../types/errors.ts";
import type { Arr } from "../model/reference/ops.ts";
import type { Residency } from "../model/model-ops.ts";
import type { CpuCore } from "./kernels/index.ts";

/**
 * Most bytes kept resident: larger weights (a 0.5B+ Hugging Face model) are copied per call as before,
 * so the 4 GiB Wasm memory keeps room for the per-call arena.
 */
const RESIDENT_MAX_BYTES = 1 << 30;

/** The open activation scopes of one backend (`Residency.scoped`): kept results, innermost scope last. */
export interface ScopeState {
  /** Core marks where each open scope began. */
  marks: number[];
  /** Most bytes the open scopes keep in all. */
  maxBytes: number;
  /** Results kept by the open scopes, in allocation order. */
  kept: Float32Array[];
  /** Their pointers. */
  ptrs: Map<ArrayLike<number>, number>;
}

export class WasmResidency implements Residency {
  /** Resident arrays (by identity) and their pointers. */
  readonly pointers = new Map<ArrayLike<number>, number>();
  /** The same, in pinning order: [array, pointer, core mark before it]. */
  private readonly pinned: [Float32Array, number, number][] = [];
  readonly scope: ScopeState;

  /** `core`: the instance, created on first use. */
  constructor(
    private readonly core: () => CpuCore,
    scopeMaxBytes: number,
  ) {
    this.scope = { marks: [], maxBytes: scopeMaxBytes, kept: [], ptrs: new Map() };
  }

  pin(arrays: Iterable<Float32Array>): boolean {
    this.noScope("pin");
    const core = this.core();
    const fresh = [...new Set(arrays)].filter((x) => x instanceof Float32Array && !this.pointers.has(x));
    const bytes = fresh.reduce((a, x) => a + x.byteLength + 16, 0);
    if (this.residentBytes() + bytes > RESIDENT_MAX_BYTES) return false;
    for (const x of fresh) {
      const mark = core.mark;
      const ptr = core.reserve(x.byteLength);
      core.view(Float32Array, ptr, x.length).set(x);
      this.pointers.set(x, ptr);
      this.pinned.push([x, ptr, mark]);
    }
    return true;
  }

  write(x: Float32Array, offset: number, length: number): void {
    const ptr = this.pointers.get(x);
    if (ptr === undefined) return;
    if (!(offset >= 0 && length >= 0 && offset + length <= x.length))
      throw new ValidationError(`range [${offset}, ${offset + length}) outside the array's ${x.length} elements`, ["offset"]);
    this.core()
      .view(Float32Array, ptr + offset * 4, length)
      .set(x.subarray(offset, offset + length));
  }

  mark(): number {
    return this.pinned.length;
  }

  release(mark = 0): void {
    if (this.pinned.length <= mark) return;
    this.noScope("release");
    const core = this.core();
    core.releaseTo(this.pinned[mark][2]);
    for (const [x] of this.pinned.splice(mark)) this.pointers.delete(x);
  }

  scoped<T>(fn: () => T): T {
    if (!this.canKeep()) return fn();
    const core = this.core();
    const start = core.mark;
    const first = this.scope.kept.length;
    this.scope.marks.push(start);
    try {
      return fn();
    } finally {
      this.scope.marks.pop();
      for (const x of this.scope.kept.splice(first)) this.scope.ptrs.delete(x);
      core.releaseTo(start);
    }
  }

  scopedKeep<A extends Arr>(fn: () => A): A {
    if (!this.canKeep()) return fn();
    const scope = this.scope;
    // outside a scope there is nothing to move the result into: a copy
    if (scope.marks.length === 0) return this.scoped(() => this.copyIfKept(fn()));
    const core = this.core();
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
  }

  /** Whether an activation scope is open (its results are in Wasm memory). */
  get inScope(): boolean {
    return this.scope.marks.length > 0;
  }

  /** A view over a shared memory survives growth; over a plain one growth detaches it, so results stay only
   * where the memory is shared. */
  private canKeep(): boolean {
    return typeof SharedArrayBuffer !== "undefined" && this.core().memory.buffer instanceof SharedArrayBuffer;
  }

  private noScope(what: string): void {
    if (this.scope.marks.length > 0)
      throw new LightningError(`resident.${what} inside an activation scope (it would free the scope's results)`);
  }

  private residentBytes(): number {
    return this.pinned.length === 0 ? 0 : this.core().mark - this.pinned[0][2];
  }

  private copyIfKept<A extends Arr>(x: A): A {
    return this.scope.ptrs.has(x) ? (x.slice() as A) : x;
  }
}
