// The CPU model kernels (issue #23): f32 SIMD kernels over raw pointers into an IMPORTED memory
// (env.memory), so one memory can later be shared by worker threads. The caller (src/cpu/kernels/) owns all
// memory above heapBase(); kernels never allocate and keep no state, so any instance may run any call.
export * from "./matmul";

/** First byte the caller may use (the runtime is the stub and nothing here allocates). */
export function heapBase(): usize {
  return __heap_base;
}
export * from "./norm";
export * from "./pointwise";
export * from "./softmax";
export * from "./attention";
export * from "./residual";
export * from "./decode";
