import { LightningError } from "../types/errors.ts";
import type { GpuTuning } from "./tuning.ts";

/**
 * A kernel's bindings, declared once by name: the uniform block (bound at 0 as `P`) and the storage
 * buffers (bound at 1..n in declaration order). The WGSL declarations and the dispatch's bind group are
 * both generated from it, and a dispatch names its buffers, so no binding number is written by hand.
 */

/** A kernel's uniform block: field name -> WGSL scalar type, in declaration order. */
export type UniformLayout = Record<string, "u32" | "f32" | "i32">;

/** A storage buffer as WGSL declares it, `var<storage, ACCESS> name: array<ELEMENT>`, written "ACCESS ELEMENT". */
export type StorageBinding = `${"read" | "read_write"} ${"f32" | "u32"}`;

/** A kernel's storage buffers: WGSL name -> access and element type, in binding order. */
export type BufferLayout = Record<string, StorageBinding>;

export interface KernelBindings<U extends UniformLayout = UniformLayout, B extends BufferLayout = BufferLayout> {
  uniforms: U;
  buffers: B;
}

/** Declares a kernel's bindings, keeping the literal names and types that type its dispatches. */
export function kernelBindings<const U extends UniformLayout, const B extends BufferLayout>(
  bindings: KernelBindings<U, B>,
): KernelBindings<U, B> {
  return bindings;
}

/** The values of a kernel's uniforms, one per declared field. */
export type UniformValues<U extends UniformLayout> = { [K in keyof U]: number };

/** The buffers of one dispatch, one per declared name. */
export type KernelBuffers<B extends BufferLayout> = { [K in keyof B]: GPUBuffer };

/** A compiled-once kernel: its WGSL source (binding block included), a cache key and its bindings. */
export interface KernelSource<U extends UniformLayout = UniformLayout, B extends BufferLayout = BufferLayout> extends KernelBindings<U, B> {
  key: string;
  code: string;
}

/** The WGSL declarations of `bindings`: `struct Params` at binding 0, then one storage array per buffer. */
export function bindingBlock(bindings: KernelBindings): string {
  const fields = Object.entries(bindings.uniforms).map(([n, t]) => `  ${n}: ${t},`);
  const storage = Object.entries(bindings.buffers).map(([name, binding], i) => {
    const [access, element] = binding.split(" ");
    return `@group(0) @binding(${i + 1}) var<storage, ${access}> ${name}: array<${element}>;\n`;
  });
  return `struct Params {\n${fields.join("\n")}\n};\n@group(0) @binding(0) var<uniform> P: Params;\n${storage.join("")}`;
}

const kernelMemo = new WeakMap<GpuTuning, Map<string, KernelSource>>();

/** Builds a kernel's source once per tuning (device) and key: the binding block, then `build()`'s WGSL. */
export function memoKernel<U extends UniformLayout, B extends BufferLayout>(
  t: GpuTuning,
  key: string,
  bindings: KernelBindings<U, B>,
  build: () => string,
): KernelSource<U, B> {
  let perTuning = kernelMemo.get(t);
  if (perTuning === undefined) kernelMemo.set(t, (perTuning = new Map()));
  let k = perTuning.get(key);
  if (k === undefined) {
    k = { key, code: bindingBlock(bindings) + build(), uniforms: bindings.uniforms, buffers: bindings.buffers };
    perTuning.set(key, k);
  }
  return k as KernelSource<U, B>;
}

/** The bind group entries of a dispatch's storage buffers, by declared name (bindings 1..n). Throws when
 * `buffers` misses a declared name or holds another one: the types refuse both, this guards untyped calls. */
export function storageEntries(kernel: KernelSource, buffers: Readonly<Record<string, GPUBuffer>>): GPUBindGroupEntry[] {
  const declared = Object.keys(kernel.buffers);
  const missing = declared.filter((name) => !Object.hasOwn(buffers, name));
  const extra = Object.keys(buffers).filter((name) => !Object.hasOwn(kernel.buffers, name));
  if (missing.length > 0 || extra.length > 0) {
    const parts = [missing.length > 0 ? `missing ${missing.join(", ")}` : "", extra.length > 0 ? `not declared ${extra.join(", ")}` : ""];
    throw new LightningError(`${kernel.key}: buffers ${parts.filter(Boolean).join("; ")} (declared: ${declared.join(", ")})`);
  }
  return declared.map((name, i) => ({ binding: i + 1, resource: { buffer: buffers[name] } }));
}
