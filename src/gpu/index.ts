export {
  requestGpuDevice,
  probeGpu,
  describeAdapter,
  GpuUnavailableError,
  GpuDeviceLostError,
  GpuOutOfMemoryError,
  type GpuAdapterReport,
  type GpuDeviceHandle,
  type GpuDeviceOptions,
} from "./device.ts";
export type { GpuRuntime } from "./navigator.ts";
export { GpuContext } from "./context.ts";
export type { GpuTuning } from "./tuning.ts";
export { GpuPolicyTrainer, type GpuTrainerOptions } from "./trainer.ts";
export { GpuValueTrainer, type GpuValueTrainerOptions } from "./value-trainer.ts";
export * from "./generation.ts";
