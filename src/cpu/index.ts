/**
 * The CPU engine (`lightning-ts/cpu`): the model's ops as Wasm SIMD kernels (assembly/cpu/) on a worker
 * pool, the fused decode step, the CPU trainer and the CPU generation engines; `ops: "reference"` runs
 * the plain-TS reference (src/model/reference/) instead. src/cpu/README.md says how.
 */
export * from "./trainer.ts";
export * from "./value-trainer.ts";
export { CpuBackend, resolveCpuEngineOptions, type CpuEngineOptions, type CpuOpsChoice } from "./backend.ts";
export * from "./generation.ts";
