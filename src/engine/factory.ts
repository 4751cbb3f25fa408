/**
 * The one place that picks a backend, WebGPU or the CPU, for the policy trainer and for the generation
 * engine; `backend: "cpu" | "webgpu"` asks for one, "auto" [default] takes WebGPU where it can.
 *
 * The trainer under "auto" takes any WebGPU adapter and falls back to the CPU trainer with a warning.
 * The generation engine under "auto" takes a hardware adapter only: a software one (lavapipe,
 * SwiftShader) counts as none, as measured with bench/generate.ts, KV-cached generation on lavapipe is
 * slower than the CPU engine on the same cores (the GPU trainer's selection in examples/calc/train.ts
 * assumes so too). The GPU generation engine is wrapped in a {@link BatchingEngine}: concurrent calls
 * decode as one batch.
 */
import { resolveCpuEngineOptions, type CpuEngineOptions } from "../cpu/backend.ts";
import { CpuGenerationEngine } from "../cpu/generation.ts";
import { CpuTrainer } from "../cpu/trainer.ts";
import { GpuContext } from "../gpu/context.ts";
import { GpuUnavailableError, probeGpu } from "../gpu/device.ts";
import { GpuGenerationEngine } from "../gpu/generation.ts";
import type { WeightFormat } from "../gpu/kernels/weights.ts";
import { GpuPolicyTrainer, type GpuTrainerOptions } from "../gpu/trainer.ts";
import { parseModelConfig } from "../model/config.ts";
import type { GenerationEngine } from "../model/generation.ts";
import { flattenParams } from "../model/params.ts";
import type { PolicyTrainer } from "../model/train-types.ts";
import { ValidationError } from "../types/errors.ts";
import { BatchingEngine } from "./batching.ts";

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

/** `ops` and `threads` (CpuEngineOptions) pick the CPU engine's ops: the Wasm kernels on every CPU
 * [default], or `ops: "reference"` (plain TS). Each CPU engine made here has a worker pool of its own. */
export interface GenerationEngineOptions extends CpuEngineOptions {
  /** "auto" [default]: WebGPU on a hardware adapter, else the CPU; "webgpu": WebGPU on any adapter, failing
   * (GpuUnavailableError) without one; "cpu": the CPU engine. */
  backend?: "auto" | "webgpu" | "cpu";
  /** A device to share, e.g. the GPU trainer's (generation and training steps then take turns on it). */
  context?: GpuContext;
  /** Where the reason for a CPU choice under "auto" goes [nowhere]. */
  log?: (message: string) => void;
  /** Weight matrices on the GPU in float32 [default] or 16 bits. */
  weightFormat?: WeightFormat;
  /** Most sequences the GPU decodes together [64]. */
  maxBatch?: number;
}

export async function createGenerationEngine(options: GenerationEngineOptions = {}): Promise<GenerationEngine> {
  const backend = options.backend ?? "auto";
  const log = options.log ?? (() => undefined);
  const cpuOptions = resolveCpuEngineOptions(options);
  const cpu = () => new CpuGenerationEngine(cpuOptions);
  if (backend === "cpu") return cpu();
  let ctx = options.context;
  if (ctx === undefined && backend === "auto") {
    // Looked at first without a device here (probeGpu): choosing the CPU then leaves no trace of WebGPU.
    const probe = await probeGpu();
    if (!probe.ok || probe.report.software) {
      log(`generation on the CPU: ${probe.ok ? "the WebGPU adapter is a software one" : probe.reason.split(". ")[0]}`);
      return cpu();
    }
  }
  if (ctx === undefined) {
    try {
      ctx = await GpuContext.create();
    } catch (e) {
      if (backend === "webgpu" || !(e instanceof GpuUnavailableError)) throw e;
      log(`generation on the CPU: ${e.message.split(". ")[0]}`);
      return cpu();
    }
  }
  if (backend === "auto" && ctx.handle?.report.software === true) {
    log("generation on the CPU: the WebGPU adapter is a software one");
    if (options.context === undefined) ctx.destroy();
    return cpu();
  }
  return new BatchingEngine(new GpuGenerationEngine(ctx, { weightFormat: options.weightFormat }), options.maxBatch);
}
