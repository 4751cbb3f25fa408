/**
 * Writes a model as a Hugging Face folder: config.json, model.safetensors (or shards and
 * model.safetensors.index.json), generation_config.json and tokenizer files. Used to export our own
 * checkpoints, and by tests and benches to build checkpoints of any shape.
 */
import { platform } from "../../platform/index.ts";
import { paramLayout, type ModelConfig } from "../config.ts";
import { paramViews, type ModelParams } from "../params.ts";
import { encodeSafetensorsRaw, type RawTensor } from "../safetensors.ts";
import { architectureFor, toHfConfig, type HfArchitecture } from "./config.ts";
import { encodeTensor, hfTensorName, type HfDtype } from "./tensors.ts";

export interface SaveHfOptions {
  config: ModelConfig;
  params: ModelParams;
  architecture?: HfArchitecture;
  /** Storage dtype of every tensor ["BF16"]. */
  dtype?: HfDtype;
  /** Split the weights into shards of at most this many bytes (plus an index) [one file]. */
  maxShardBytes?: number;
  generation?: {
    eosTokenIds?: number[];
    bosTokenId?: number | null;
    padTokenId?: number | null;
    temperature?: number;
    topP?: number;
    topK?: number;
  };
  /** Extra files written as they are (tokenizer.json, tokenizer_config.json, ...). */
  extraFiles?: Record<string, string | Uint8Array>;
}

const TORCH_DTYPES: Record<HfDtype, string> = { F32: "float32", BF16: "bfloat16", F16: "float16" };

function safetensorsFile(tensors: RawTensor[]): Uint8Array {
  return encodeSafetensorsRaw(tensors, { format: "pt" });
}

/** The folder's files by name, as bytes (a file map `loadPretrained` accepts). */
export function hfModelFiles(o: SaveHfOptions): Record<string, Uint8Array> {
  const files: Record<string, Uint8Array> = {};
  for (const [name, content] of Object.entries(hfModelTexts(o)))
    files[name] = typeof content === "string" ? new TextEncoder().encode(content) : content;
  return files;
}

function hfModelTexts(o: SaveHfOptions): Record<string, string | Uint8Array> {
  const dtype = o.dtype ?? "BF16";
  const architecture = o.architecture ?? architectureFor(o.config);
  const views = paramViews(o.config, o.params);
  const tensors = paramLayout(o.config).map((spec) => {
    const { hf, transpose } = hfTensorName(spec.name);
    const rows = spec.shape.length === 2 ? spec.shape[0] : 1;
    const cols = spec.shape.length === 2 ? spec.shape[1] : spec.size;
    const shape = transpose ? [spec.shape[1], spec.shape[0]] : spec.shape;
    return { name: hf, dtype, shape, bytes: encodeTensor(views[spec.name], dtype, rows, cols, transpose) };
  });
  const g = o.generation ?? {};
  const files: Record<string, string | Uint8Array> = {
    "config.json": JSON.stringify(
      toHfConfig(o.config, {
        architecture,
        torchDtype: TORCH_DTYPES[dtype],
        eosTokenIds: g.eosTokenIds,
        bosTokenId: g.bosTokenId,
        padTokenId: g.padTokenId,
      }),
      null,
      2,
    ),
    "generation_config.json": JSON.stringify(
      {
        ...(g.bosTokenId !== undefined && g.bosTokenId !== null ? { bos_token_id: g.bosTokenId } : {}),
        ...(g.eosTokenIds?.length ? { eos_token_id: g.eosTokenIds.length === 1 ? g.eosTokenIds[0] : g.eosTokenIds } : {}),
        ...(g.padTokenId !== undefined && g.padTokenId !== null ? { pad_token_id: g.padTokenId } : {}),
        ...(g.temperature !== undefined ? { temperature: g.temperature, do_sample: g.temperature > 0 } : {}),
        ...(g.topP !== undefined ? { top_p: g.topP } : {}),
        ...(g.topK !== undefined ? { top_k: g.topK } : {}),
      },
      null,
      2,
    ),
    ...o.extraFiles,
  };
  const limit = o.maxShardBytes;
  if (limit === undefined) {
    files["model.safetensors"] = safetensorsFile(tensors);
    return files;
  }
  const shards: (typeof tensors)[] = [[]];
  let size = 0;
  for (const t of tensors) {
    if (size > 0 && size + t.bytes.length > limit) {
      shards.push([]);
      size = 0;
    }
    shards[shards.length - 1].push(t);
    size += t.bytes.length;
  }
  const weightMap: Record<string, string> = {};
  shards.forEach((shard, i) => {
    const name = `model-${String(i + 1).padStart(5, "0")}-of-${String(shards.length).padStart(5, "0")}.safetensors`;
    files[name] = safetensorsFile(shard);
    for (const t of shard) weightMap[t.name] = name;
  });
  const totalSize = tensors.reduce((a, t) => a + t.bytes.length, 0);
  files["model.safetensors.index.json"] = JSON.stringify({ metadata: { total_size: totalSize }, weight_map: weightMap }, null, 2);
  return files;
}

/** Writes the folder (created with its parents); each file goes to a temporary name first, then is renamed. */
export async function saveHfModel(dir: string, o: SaveHfOptions): Promise<void> {
  const io = platform.files();
  await io.mkdir(dir);
  for (const [name, content] of Object.entries(hfModelFiles(o))) {
    const path = dir.endsWith("/") ? dir + name : `${dir}/${name}`;
    await io.writeFile(`${path}.tmp`, content);
    await io.rename(`${path}.tmp`, path);
  }
}
