/**
 * The Wasm kernels the library's own code runs (trace adapters, the batch builder, GRPO's advantages):
 * one instance per process, created on first use, apart from the shared core that `loadWasmCore()`
 * hands to callers, so a library call never invalidates views a caller holds into that core's memory.
 */
import { WasmKernels } from "./kernels.ts";
import { instantiateWasmCoreSync } from "./loader.ts";
import type { Kernels } from "./types.ts";

let kernels: Kernels | undefined;

export function libraryKernels(): Kernels {
  kernels ??= new WasmKernels(instantiateWasmCoreSync());
  return kernels;
}
