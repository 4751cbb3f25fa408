/**
 * A LoRA training checkpoint: the adapter in PEFT's layout (`adapter_config.json` +
 * `adapter_model.safetensors`, float32 so resuming is exact; PEFT and vLLM load the folder as it is)
 * plus `optimizer.safetensors` with the AdamW moments of every adapter tensor (`m.<name>`, `v.<name>`
 * in `loraLayout` names) and the optimizer step. Loading both resumes training bit-exactly.
 */
import { platform } from "../../platform/index.ts";
import { CHECKPOINT_FORMAT, OPTIMIZER_FILE } from "../checkpoint.ts";
import type { ModelConfig } from "../config.ts";
import { loraLayout, type LoraConfig } from "../lora.ts";
import { encodeSafetensors, readSafetensorsHeader, readTensor } from "../safetensors.ts";
import type { OptimizerState } from "../train-types.ts";
import { HfFormatError } from "./errors.ts";
import { loadPeftAdapter, savePeftAdapter, type PeftAdapter } from "./peft.ts";

function join(dir: string, file: string): string {
  return dir.endsWith("/") ? dir + file : `${dir}/${file}`;
}

/** `optimizer.safetensors` bytes for an adapter's AdamW state. */
export function encodeLoraOptimizer(model: ModelConfig, lora: LoraConfig, state: OptimizerState): Uint8Array {
  const layout = loraLayout(model, lora);
  const size = layout.reduce((a, s) => a + s.size, 0);
  for (const [k, a] of [
    ["m", state.m],
    ["v", state.v],
  ] as const)
    if (a.length !== size) throw new HfFormatError(OPTIMIZER_FILE, k, `has ${a.length} elements, the adapter needs ${size}`);
  const views = (prefix: string, flat: Float32Array) =>
    layout.map((s) => ({ name: prefix + s.name, shape: s.shape, data: flat.subarray(s.offset, s.offset + s.size) }));
  return encodeSafetensors([...views("m.", state.m), ...views("v.", state.v)], {
    format: CHECKPOINT_FORMAT,
    step: String(state.step),
    lora: JSON.stringify(lora),
  });
}

/** The AdamW state in `optimizer.safetensors` bytes, checked against the adapter's layout. */
export function decodeLoraOptimizer(model: ModelConfig, lora: LoraConfig, bytes: Uint8Array): OptimizerState {
  const header = readSafetensorsHeader(bytes);
  const step = Number(header.metadata.step);
  if (!Number.isInteger(step) || step < 0)
    throw new HfFormatError(OPTIMIZER_FILE, "__metadata__.step", `not a valid step: ${header.metadata.step}`);
  const layout = loraLayout(model, lora);
  const size = layout.reduce((a, s) => a + s.size, 0);
  const gather = (prefix: string): Float32Array => {
    const flat = new Float32Array(size);
    for (const s of layout) {
      const e = header.tensors[prefix + s.name];
      if (!e) throw new HfFormatError(OPTIMIZER_FILE, prefix + s.name, "missing (the optimizer state belongs to another adapter)");
      if (JSON.stringify(e.shape) !== JSON.stringify(s.shape))
        throw new HfFormatError(
          OPTIMIZER_FILE,
          prefix + s.name,
          `shape ${JSON.stringify(e.shape)}, the adapter needs ${JSON.stringify(s.shape)}`,
        );
      flat.set(readTensor(bytes, header, prefix + s.name), s.offset);
    }
    return flat;
  };
  return { step, m: gather("m."), v: gather("v.") };
}

/** Writes the adapter (PEFT layout, float32) and, when given, its optimizer state into `dir`. */
export async function saveLoraCheckpoint(
  dir: string,
  model: ModelConfig,
  adapter: PeftAdapter,
  optimizer?: OptimizerState,
  options: { baseModel?: string } = {},
): Promise<void> {
  await savePeftAdapter(dir, model, adapter, { ...options, dtype: "F32" });
  if (!optimizer) return;
  const io = platform.files();
  const path = join(dir, OPTIMIZER_FILE);
  await io.writeFile(`${path}.tmp`, encodeLoraOptimizer(model, adapter.config, optimizer));
  await io.rename(`${path}.tmp`, path);
}

/** Loads a checkpoint folder written by {@link saveLoraCheckpoint} (or any PEFT adapter folder: then no optimizer). */
export async function loadLoraCheckpoint(dir: string, model: ModelConfig): Promise<{ adapter: PeftAdapter; optimizer?: OptimizerState }> {
  const adapter = await loadPeftAdapter(dir, model);
  const io = platform.files();
  const path = join(dir, OPTIMIZER_FILE);
  if (!(await io.exists(path))) return { adapter };
  return { adapter, optimizer: decodeLoraOptimizer(model, adapter.config, await io.readFile(path)) };
}
