/**
 * `loadPretrained`: a Hugging Face model folder (config.json, model.safetensors or a sharded index,
 * generation_config.json, tokenizer files) → our config, weights by name, tokenizer and generation
 * defaults. Tensors are read one at a time, in pieces, straight into their float32 outputs in our
 * layout (tensor-reader.ts).
 */
import type { FileReader } from "../../platform/index.ts";
import { paramLayout, type ModelConfig } from "../config.ts";
import type { ModelWeights } from "../params.ts";
import { parseSafetensorsHeader, safetensorsHeaderLength, type HeaderEntry } from "../safetensors.ts";
import type { Tokenizer } from "../tokenizer-api.ts";
import { ValidationError } from "../../types/errors.ts";
import { parseHfConfig, tokenIds, type HfArchitecture, type HfModelInfo } from "./config.ts";
import { HfFormatError } from "./errors.ts";
import { modelFiles, readJson, type ModelFiles, type ModelSource } from "./source.ts";
import { TensorReader } from "./tensor-reader.ts";
import { hfTensorName, type HfDtype } from "./tensors.ts";
import { loadHfTokenizer } from "./tokenizer.ts";

export interface GenerationDefaults {
  /** Ids that end generation (generation_config.json, else config.json). */
  eosTokenIds: number[];
  bosTokenId: number | null;
  padTokenId: number | null;
  temperature?: number;
  topP?: number;
  topK?: number;
}

export interface PretrainedModel {
  /** The model's name: the `name` option, else the folder's last path segment. */
  name: string;
  architecture: HfArchitecture;
  config: ModelConfig;
  /** float32 tensors in our layout (src/model/config.ts), by name. */
  weights: ModelWeights;
  /** From tokenizer.json + tokenizer_config.json; null when the folder has no tokenizer.json. */
  tokenizer: Tokenizer | null;
  generation: GenerationDefaults;
  /** Tensors of the files that the model does not use (e.g. rotary caches of old checkpoints). */
  ignoredTensors: string[];
}

export interface LoadOptions {
  /** Caps the context length (default: max_position_embeddings). */
  maxSeqLen?: number;
  /** Name reported by the model [folder name]. */
  name?: string;
  /** Called after each tensor with bytes read so far and the total. */
  onProgress?: (loadedBytes: number, totalBytes: number) => void;
}

const INDEX = "model.safetensors.index.json";
const SINGLE = "model.safetensors";

interface Shard {
  file: string;
  reader: FileReader;
  tensors: Record<string, HeaderEntry>;
  dataStart: number;
}

async function openShard(files: ModelFiles, file: string, listedInIndex: boolean): Promise<Shard> {
  let reader: FileReader;
  try {
    reader = await files.open(file);
  } catch (e) {
    if (e instanceof HfFormatError && listedInIndex) throw new HfFormatError(INDEX, "weight_map", `lists shard ${file}, which is absent`);
    throw e;
  }
  try {
    const n = safetensorsHeaderLength(await reader.read(0, 8), reader.size);
    const header = parseSafetensorsHeader(await reader.read(8, n), reader.size);
    return { file, reader, tensors: header.tensors, dataStart: header.dataStart };
  } catch (e) {
    await reader.close();
    if (e instanceof ValidationError && !(e instanceof HfFormatError))
      throw new HfFormatError(file, e.issues[0]?.path.join(".") ?? null, e.message);
    throw e;
  }
}

/** Which shard holds each tensor: the index's weight_map, or the single file's header. */
async function openShards(files: ModelFiles): Promise<{ shards: Shard[]; where: Map<string, Shard> }> {
  const where = new Map<string, Shard>();
  if (await files.has(INDEX)) {
    const index = await readJson(files, INDEX);
    const map = index.weight_map;
    if (typeof map !== "object" || map === null || Array.isArray(map))
      throw new HfFormatError(INDEX, "weight_map", "missing or not an object");
    const byFile = new Map<string, string[]>();
    for (const [tensor, file] of Object.entries(map as Record<string, unknown>)) {
      if (typeof file !== "string") throw new HfFormatError(INDEX, `weight_map.${tensor}`, "not a file name");
      byFile.set(file, [...(byFile.get(file) ?? []), tensor]);
    }
    const shards: Shard[] = [];
    try {
      for (const [file, tensors] of byFile) {
        const shard = await openShard(files, file, true);
        shards.push(shard);
        for (const t of tensors) {
          if (!shard.tensors[t]) throw new HfFormatError(file, t, `listed in ${INDEX} but not in the file`);
          where.set(t, shard);
        }
      }
    } catch (e) {
      await Promise.all(shards.map((s) => s.reader.close()));
      throw e;
    }
    return { shards, where };
  }
  const shard = await openShard(files, SINGLE, false);
  for (const t of Object.keys(shard.tensors)) where.set(t, shard);
  return { shards: [shard], where };
}

function optionalNumber(raw: Record<string, unknown>, field: string): number | undefined {
  const v = raw[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isFinite(v))
    throw new HfFormatError("generation_config.json", field, `not a number: ${JSON.stringify(v)}`);
  return v;
}

/** generation_config.json over config.json's token ids. */
async function generationDefaults(
  files: ModelFiles,
  fromConfig: Pick<GenerationDefaults, "eosTokenIds" | "bosTokenId" | "padTokenId">,
): Promise<GenerationDefaults> {
  if (!(await files.has("generation_config.json"))) return { ...fromConfig };
  const raw = await readJson(files, "generation_config.json");
  const file = "generation_config.json";
  const eos = tokenIds(raw.eos_token_id, file, "eos_token_id");
  const one = (field: string, fallback: number | null): number | null =>
    raw[field] === undefined ? fallback : (tokenIds(raw[field], file, field)[0] ?? null);
  const out: GenerationDefaults = {
    eosTokenIds: eos.length ? eos : fromConfig.eosTokenIds,
    bosTokenId: one("bos_token_id", fromConfig.bosTokenId),
    padTokenId: one("pad_token_id", fromConfig.padTokenId),
  };
  const t = optionalNumber(raw, "temperature");
  const p = optionalNumber(raw, "top_p");
  const k = optionalNumber(raw, "top_k");
  if (t !== undefined) out.temperature = t;
  if (p !== undefined) out.topP = p;
  if (k !== undefined) out.topK = k;
  return out;
}

/** The HF shape of one of our tensors: matrices are [out, in] there. */
function hfShape(shape: number[], transpose: boolean): number[] {
  return transpose ? [shape[1], shape[0]] : shape;
}

const MODEL_FOLDER = "a Hugging Face model folder";

/** A model folder's config.json alone (architecture, our config, context length): cheap, for checks before the weights load. */
export async function readModelInfo(source: ModelSource, options: Pick<LoadOptions, "maxSeqLen"> = {}): Promise<HfModelInfo> {
  return parseHfConfig(await readJson(modelFiles(source, MODEL_FOLDER), "config.json"), { maxSeqLen: options.maxSeqLen });
}

/** Loads a Hugging Face Llama / Qwen2 / Qwen3 checkpoint. */
export async function loadPretrained(source: ModelSource, options: LoadOptions = {}): Promise<PretrainedModel> {
  const files = modelFiles(source, MODEL_FOLDER);
  const info = parseHfConfig(await readJson(files, "config.json"), { maxSeqLen: options.maxSeqLen });
  const generation = await generationDefaults(files, info);
  const { config } = info;
  const { shards, where } = await openShards(files);
  const weights: ModelWeights = {};
  const used = new Set<string>();
  try {
    const layout = paramLayout(config);
    const plan = layout.map((spec) => {
      const { hf, transpose } = hfTensorName(spec.name);
      const shard = where.get(hf);
      if (!shard) throw new HfFormatError(shards.length > 1 ? INDEX : SINGLE, hf, `missing tensor (needed for ${spec.name})`);
      const entry = shard.tensors[hf];
      const want = hfShape(spec.shape, transpose);
      if (JSON.stringify(entry.shape) !== JSON.stringify(want))
        throw new HfFormatError(shard.file, hf, `has shape ${JSON.stringify(entry.shape)}, config.json needs ${JSON.stringify(want)}`);
      if (!["F32", "F16", "BF16"].includes(entry.dtype))
        throw new HfFormatError(shard.file, hf, `unsupported dtype ${entry.dtype} (supported: BF16, F16, F32)`);
      used.add(hf);
      return { spec, hf, transpose, shard, entry };
    });
    const total = plan.reduce((a, p) => a + (p.entry.data_offsets[1] - p.entry.data_offsets[0]), 0);
    let loaded = 0;
    const tensors = new TensorReader();
    for (const { spec, hf, transpose, shard, entry } of plan) {
      const [begin, end] = entry.data_offsets;
      const rows = entry.shape.length === 2 ? entry.shape[0] : 1;
      const cols = entry.shape.length === 2 ? entry.shape[1] : spec.size;
      const at = { reader: shard.reader, file: shard.file, name: hf, offset: shard.dataStart + begin };
      weights[spec.name] = await tensors.read(at, entry.dtype as HfDtype, rows, cols, transpose);
      loaded += end - begin;
      options.onProgress?.(loaded, total);
    }
  } finally {
    await Promise.all(shards.map((s) => s.reader.close()));
  }
  const ignoredTensors = [...where.keys()].filter((t) => !used.has(t));
  const tokenizer = (await files.has("tokenizer.json")) ? await loadHfTokenizer(files, generation.eosTokenIds) : null;
  const name = options.name ?? (typeof source === "string" ? source.replace(/\/+$/, "").split("/").pop() || source : "model");
  return { name, architecture: info.architecture, config, weights, tokenizer, generation, ignoredTensors };
}
