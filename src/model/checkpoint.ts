/**
 * Checkpoints as safetensors. A checkpoint directory holds:
 * - `model.safetensors`: every parameter under its layout name (config.ts), F32, with metadata
 *   `format: "lightning-ts"`, `config`: the model config as JSON, and `step` (optimizer steps taken);
 * - `optimizer.safetensors` (when there is optimizer state): AdamW moments as `m.<name>` and
 *   `v.<name>`, metadata `step`. Together they resume training bit-exactly.
 * Files go through a tiny {@link FsAdapter}; the default is the platform's (src/platform/: Node, Deno
 * and Bun). Byte-level encode/decode functions serve browsers and custom storage.
 */
import { platform, type FileAccess } from "../platform/index.ts";
import { paramLayout, parseModelConfig, type ModelConfig, type ParamSpec } from "./config.ts";
import { encodeSafetensors, readSafetensorsHeader, readTensor, type NamedTensor } from "./safetensors.ts";
import { ValidationError } from "../types/errors.ts";
import type { OptimizerState } from "./train-types.ts";

export const CHECKPOINT_FORMAT = "lightning-ts";
export const MODEL_FILE = "model.safetensors";
export const OPTIMIZER_FILE = "optimizer.safetensors";

export interface Checkpoint {
  config: ModelConfig;
  /** Flat parameters in `paramLayout(config)` order (a critic's: `valueLayout`, src/model/value-checkpoint.ts). */
  params: Float32Array;
  optimizer?: OptimizerState;
}

/** The tensors a config's flat buffer holds: the policy's `paramLayout` unless a checkpoint of another
 * model says otherwise (the critic's `valueLayout`). */
export type LayoutOf = (config: ModelConfig) => ParamSpec[];

function layoutSize(layout: ParamSpec[]): number {
  const last = layout[layout.length - 1];
  return last === undefined ? 0 : last.offset + last.size;
}

/** The file operations checkpoints need. */
export type FsAdapter = FileAccess;

/** The platform's file access (Node, Deno and Bun). */
export async function nodeFs(): Promise<FsAdapter> {
  return platform.files();
}

function views(layout: ParamSpec[], flat: Float32Array, prefix = ""): NamedTensor[] {
  return layout.map((s) => ({ name: prefix + s.name, shape: s.shape, data: flat.subarray(s.offset, s.offset + s.size) }));
}

/** `model.safetensors` bytes for a config and its flat parameters. */
export function encodeModel(config: ModelConfig, params: Float32Array, step = 0, layoutOf: LayoutOf = paramLayout): Uint8Array {
  const layout = layoutOf(config);
  checkSize(layout, params, "params");
  return encodeSafetensors(views(layout, params), { format: CHECKPOINT_FORMAT, config: JSON.stringify(config), step: String(step) });
}

/** Config, flat parameters and step from `model.safetensors` bytes (tensor order in the file does not matter). */
export function decodeModel(
  bytes: Uint8Array,
  layoutOf: LayoutOf = paramLayout,
): { config: ModelConfig; params: Float32Array; step: number } {
  const header = readSafetensorsHeader(bytes);
  if (header.metadata.config === undefined)
    throw new ValidationError("checkpoint has no config in its __metadata__", ["__metadata__", "config"]);
  let rawConfig: unknown;
  try {
    rawConfig = JSON.parse(header.metadata.config);
  } catch (e) {
    throw new ValidationError(`checkpoint config is not JSON: ${(e as Error).message}`, ["__metadata__", "config"]);
  }
  const config = parseModelConfig(rawConfig);
  const params = gather(layoutOf(config), bytes, header, "");
  return { config, params, step: Number(header.metadata.step ?? 0) };
}

function gather(layout: ParamSpec[], bytes: Uint8Array, header: ReturnType<typeof readSafetensorsHeader>, prefix: string): Float32Array {
  const flat = new Float32Array(layoutSize(layout));
  for (const s of layout) {
    const e = header.tensors[prefix + s.name];
    if (!e) throw new ValidationError(`checkpoint is missing tensor ${prefix + s.name}`, [prefix + s.name]);
    if (JSON.stringify(e.shape) !== JSON.stringify(s.shape))
      throw new ValidationError(
        `tensor ${prefix + s.name} has shape ${JSON.stringify(e.shape)}, the config needs ${JSON.stringify(s.shape)}`,
        [prefix + s.name],
      );
    flat.set(readTensor(bytes, header, prefix + s.name), s.offset);
  }
  return flat;
}

/** `optimizer.safetensors` bytes: AdamW moments and step. */
export function encodeOptimizer(config: ModelConfig, state: OptimizerState, layoutOf: LayoutOf = paramLayout): Uint8Array {
  const layout = layoutOf(config);
  checkSize(layout, state.m, "optimizer.m");
  checkSize(layout, state.v, "optimizer.v");
  return encodeSafetensors([...views(layout, state.m, "m."), ...views(layout, state.v, "v.")], {
    format: CHECKPOINT_FORMAT,
    step: String(state.step),
  });
}

export function decodeOptimizer(config: ModelConfig, bytes: Uint8Array, layoutOf: LayoutOf = paramLayout): OptimizerState {
  const header = readSafetensorsHeader(bytes);
  const step = Number(header.metadata.step);
  if (!Number.isInteger(step) || step < 0)
    throw new ValidationError(`optimizer checkpoint has no valid step (${header.metadata.step})`, ["__metadata__", "step"]);
  const layout = layoutOf(config);
  return { step, m: gather(layout, bytes, header, "m."), v: gather(layout, bytes, header, "v.") };
}

function checkSize(layout: ParamSpec[], a: Float32Array, name: string): void {
  const n = layoutSize(layout);
  if (a.length !== n) throw new ValidationError(`${name} has ${a.length} elements, the config needs ${n}`, [name]);
}

function join(dir: string, file: string): string {
  return dir.endsWith("/") ? dir + file : `${dir}/${file}`;
}

/** Writes each file to a temporary name first, then renames it, so a crash never leaves half a checkpoint file.
 * `layoutOf` names the tensors of another model's flat buffer (the critic's). */
export async function saveCheckpoint(dir: string, ckpt: Checkpoint, fs?: FsAdapter, layoutOf: LayoutOf = paramLayout): Promise<void> {
  const io = fs ?? (await nodeFs());
  await io.mkdir(dir);
  const files: Array<[string, Uint8Array]> = [[MODEL_FILE, encodeModel(ckpt.config, ckpt.params, ckpt.optimizer?.step ?? 0, layoutOf)]];
  if (ckpt.optimizer) files.push([OPTIMIZER_FILE, encodeOptimizer(ckpt.config, ckpt.optimizer, layoutOf)]);
  for (const [name, bytes] of files) {
    const path = join(dir, name);
    await io.writeFile(path + ".tmp", bytes);
    await io.rename(path + ".tmp", path);
  }
}

/** Loads a checkpoint directory; `optimizer` is present when the directory has `optimizer.safetensors`. */
export async function loadCheckpoint(
  dir: string,
  fs?: FsAdapter,
  options: { optimizer?: boolean; layoutOf?: LayoutOf } = {},
): Promise<Checkpoint> {
  const io = fs ?? (await nodeFs());
  const layoutOf = options.layoutOf ?? paramLayout;
  const { config, params } = decodeModel(await io.readFile(join(dir, MODEL_FILE)), layoutOf);
  if (options.optimizer === false) return { config, params };
  let bytes: Uint8Array;
  try {
    bytes = await io.readFile(join(dir, OPTIMIZER_FILE));
  } catch (e) {
    if ((e as { code?: string }).code === "ENOENT" && options.optimizer !== true) return { config, params };
    throw e;
  }
  return { config, params, optimizer: decodeOptimizer(config, bytes, layoutOf) };
}
