export { CpuCore } from "./core.ts";
export { cpuCore, cpuKernelBytes, instantiateCpuCore, loadCpuCore } from "./loader.ts";
export { GEMM_FORM, type CpuKernelExports } from "./exports.ts";
