import { parseModelConfig } from "../model/config.ts";
import type { CpuEngineOptions } from "../cpu/backend.ts";
import { CpuTrainer } from "../cpu/trainer.ts";
import { flattenParams } from "../model/params.ts";
import type { PolicyTrainer } from "../model/train-types.ts";
import { ValidationError } from "../types/errors.ts";
import { GpuUnavailableError } from "./device.ts";
import { GpuPolicyTrainer, type GpuTrainerOptions } from "./trainer.ts";

/** `ops` and `threads` (CpuEngineOptions) pick the CPU trainer's ops: the Wasm kernels on every CPU by
 * default, or `ops: "reference"` (plain TS); the WebGPU trainer has no such setting. */
export interface CreateTrainerOptions extends GpuTrainerOptions, CpuEngineOptions {
  /** "auto" (default): WebGPU when an adapter exists, else the CPU trainer with a warning. */
  backend?: "auto" | "webgpu" | "cpu";
  /** Where the fallback warning goes [console.warn]. */
  warn?: (message: string) => void;
}

/** A policy trainer on the best backend available here. "webgpu" fails (GpuUnavailableError) instead of
 * falling back. `lora` trains an adapter on either backend. */
export async function createPolicyTrainer(options: CreateTrainerOptions): Promise<PolicyTrainer> {
  const backend = options.backend ?? "auto";
  if (backend === "cpu") {
    const unused = gpuOnlyOptions(options);
    if (unused.length > 0)
      throw new ValidationError(
        `${unused.join(" and ")} ${unused.length > 1 ? "are" : "is"} WebGPU-only: the CPU trainer has no such setting`,
        [unused[0]],
      );
    return cpuTrainer(options);
  }
  try {
    return await GpuPolicyTrainer.create(options);
  } catch (e) {
    if (backend === "webgpu" || !(e instanceof GpuUnavailableError)) throw e;
    const unused = gpuOnlyOptions(options);
    const note = unused.length > 0 ? `; ${unused.join(" and ")} do${unused.length > 1 ? "" : "es"} not apply there` : "";
    (options.warn ?? console.warn)(`WebGPU unavailable, training on the CPU (slow)${note}: ${e.message}`);
    return cpuTrainer(options);
  }
}

/** The options set here that only the WebGPU trainer has (the CPU trainer keeps float32 and every activation). */
function gpuOnlyOptions(options: CreateTrainerOptions): string[] {
  const out: string[] = [];
  if (options.weightFormat !== undefined && options.weightFormat !== "f32") out.push("weightFormat");
  if (options.recomputeActivations === true) out.push("recomputeActivations");
  return out;
}

/** The CPU trainer takes one flat parameter buffer. */
function cpuTrainer(options: CreateTrainerOptions): CpuTrainer {
  const params = options.params === undefined ? undefined : flattenParams(parseModelConfig(options.config), options.params);
  return new CpuTrainer({ ...options, params });
}
