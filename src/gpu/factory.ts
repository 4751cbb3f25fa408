import { parseModelConfig } from "../model/config.ts";
import { CpuTrainer } from "../model/cpu-trainer.ts";
import { flattenParams } from "../model/params.ts";
import type { PolicyTrainer } from "../model/train-types.ts";
import { GpuUnavailableError } from "./device.ts";
import { GpuPolicyTrainer, type GpuTrainerOptions } from "./trainer.ts";

export interface CreateTrainerOptions extends GpuTrainerOptions {
  /** "auto" (default): WebGPU when an adapter exists, else the CPU trainer with a warning. */
  backend?: "auto" | "webgpu" | "cpu";
  /** Where the fallback warning goes [console.warn]. */
  warn?: (message: string) => void;
}

/** A policy trainer on the best backend available here. "webgpu" fails (GpuUnavailableError) instead of falling back. */
export async function createPolicyTrainer(options: CreateTrainerOptions): Promise<PolicyTrainer> {
  const backend = options.backend ?? "auto";
  if (backend === "cpu") return cpuTrainer(options);
  try {
    return await GpuPolicyTrainer.create(options);
  } catch (e) {
    if (backend === "webgpu" || !(e instanceof GpuUnavailableError)) throw e;
    (options.warn ?? console.warn)(`WebGPU unavailable, training on the CPU (slow): ${e.message}`);
    return cpuTrainer(options);
  }
}

/** The CPU trainer takes one flat parameter buffer. */
function cpuTrainer(options: CreateTrainerOptions): CpuTrainer {
  const params = options.params === undefined ? undefined : flattenParams(parseModelConfig(options.config), options.params);
  return new CpuTrainer({ ...options, params });
}
