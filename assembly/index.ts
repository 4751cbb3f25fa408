// The Lightning TS Wasm core: every export is a kernel over raw pointers into this module's memory.
// The caller (src/wasm/) owns all memory above heapBase(); kernels never allocate.
export * from "./layout";
export * from "./advantage";
export * from "./trace";

/** First byte the caller may use (the runtime is the stub and nothing here allocates). */
export function heapBase(): usize {
  return __heap_base;
}
