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
export { GpuContext, type GpuTuning } from "./context.ts";
export { GpuPolicyTrainer, type GpuTrainerOptions } from "./trainer.ts";
export * from "./generation.ts";
