/**
 * Picks the generation engine the policy server runs on: the KV-cached WebGPU engine when a hardware
 * adapter is there, the CPU engine otherwise. A software adapter (lavapipe, SwiftShader) counts as none
 * under "auto": measured with bench/generate.ts, KV-cached generation on lavapipe is slower than the CPU
 * engine on the same cores, as the GPU trainer's selection (examples/calc/train.ts) assumes too.
 * The GPU engine is wrapped in a {@link BatchingEngine}: concurrent calls decode as one batch.
 */
import { GpuContext } from "../gpu/context.ts";
import { GpuUnavailableError } from "../gpu/device.ts";
import type { WeightFormat } from "../gpu/kernels/weights.ts";
import { BatchingEngine } from "./batching.ts";
import { resolveCpuEngineOptions, type CpuEngineOptions } from "../cpu/backend.ts";
import { CpuGenerationEngine, type GenerationEngine } from "./generation.ts";
import { GpuGenerationEngine } from "./gpu-generation.ts";

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
