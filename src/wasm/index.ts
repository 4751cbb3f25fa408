export * from "./types.ts";
export { WasmCore } from "./core.ts";
export { loadWasmCore, loadWasmCoreSync, instantiateWasmCore, instantiateWasmCoreSync, kernelBytes } from "./loader.ts";
export { WasmKernels, wasmKernels } from "./kernels.ts";
export { libraryKernels } from "./library-kernels.ts";
export { referenceKernels } from "./reference/index.ts";
export { toRagged } from "./validate.ts";
export { TRACE_FLAG, TRACE_OPT } from "./exports.ts";
export {
  computeRolloutLevelAdvantage,
  normalizeAdvantagesByRollout,
  type RolloutLevelInput,
  type RolloutLevelResult,
  type RepresentativeBatch,
} from "./rollout-level.ts";
export { denseIds } from "./dense-ids.ts";
