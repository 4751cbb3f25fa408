/**
 * LoRA adapters in PEFT's saved layout, so PEFT, vLLM and our engine exchange them:
 * `adapter_config.json` (`peft_type: "LORA"`, `r`, `lora_alpha`, `target_modules`, ...) and
 * `adapter_model.safetensors` with tensors named
 * `base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight` [r, in] and `...lora_B.weight` [out, r]
 * (ours are their transposes: src/model/lora.ts). Also merging an adapter into the base weights.
 */
import { platform } from "../../platform/index.ts";
import type { ModelConfig } from "../config.ts";
import {
  LORA_TARGET_WEIGHT,
  LORA_TARGETS,
  loraLayout,
  loraParamCount,
  loraScaling,
  parseLoraConfig,
  type LoraConfig,
  type LoraTarget,
} from "../lora.ts";
import { paramViews, type ModelParams, type ModelWeights } from "../params.ts";
import { matmul } from "../reference/ops.ts";
import { encodeSafetensorsRaw, parseSafetensorsHeader, safetensorsHeaderLength } from "../safetensors.ts";
import { ValidationError } from "../../types/errors.ts";
import { HfFormatError } from "./errors.ts";
import { modelFiles, readJson, type ModelSource } from "./source.ts";
import { convertTensor, encodeTensor, type HfDtype } from "./tensors.ts";

const CONFIG_FILE = "adapter_config.json";
const WEIGHTS_FILE = "adapter_model.safetensors";

const MODULE_PATH: Record<LoraTarget, string> = {
  q_proj: "self_attn.q_proj",
  k_proj: "self_attn.k_proj",
  v_proj: "self_attn.v_proj",
  o_proj: "self_attn.o_proj",
  gate_proj: "mlp.gate_proj",
  up_proj: "mlp.up_proj",
  down_proj: "mlp.down_proj",
};

const TARGET_OF_WEIGHT = Object.fromEntries(Object.entries(LORA_TARGET_WEIGHT).map(([t, w]) => [w, t])) as Record<string, LoraTarget>;

/** Our adapter tensor name (`layers.3.wq.lora_a`) → PEFT's name and whether it is A or B. */
export function peftTensorName(name: string): string {
  const m = /^layers\.(\d+)\.(\w+)\.lora_(a|b)$/.exec(name);
  const target = m ? TARGET_OF_WEIGHT[m[2]] : undefined;
  if (!m || !target) throw new ValidationError(`not an adapter tensor name: ${name}`, [name]);
  return `base_model.model.model.layers.${m[1]}.${MODULE_PATH[target]}.lora_${m[3] === "a" ? "A" : "B"}.weight`;
}

export interface PeftAdapter {
  config: LoraConfig;
  /** Flat, in `loraLayout(model, config)` order. */
  params: Float32Array;
}

/** The adapter's two files as bytes. */
export function peftAdapterFiles(
  model: ModelConfig,
  adapter: PeftAdapter,
  options: { baseModel?: string; dtype?: HfDtype } = {},
): Record<string, Uint8Array> {
  const dtype = options.dtype ?? "F32";
  const n = loraParamCount(model, adapter.config);
  if (adapter.params.length !== n)
    throw new ValidationError(`adapter has ${adapter.params.length} elements, the LoRA config needs ${n}`, ["params"]);
  const tensors = loraLayout(model, adapter.config).map((s) => ({
    name: peftTensorName(s.name),
    dtype,
    shape: [s.shape[1], s.shape[0]],
    bytes: encodeTensor(adapter.params.subarray(s.offset, s.offset + s.size), dtype, s.shape[0], s.shape[1], true),
  }));
  const config = {
    peft_type: "LORA",
    task_type: "CAUSAL_LM",
    base_model_name_or_path: options.baseModel ?? null,
    r: adapter.config.r,
    lora_alpha: adapter.config.alpha,
    lora_dropout: 0,
    target_modules: adapter.config.targetModules,
    bias: "none",
    fan_in_fan_out: false,
    use_rslora: false,
    use_dora: false,
    init_lora_weights: true,
    inference_mode: true,
    modules_to_save: null,
    layers_to_transform: null,
    rank_pattern: {},
    alpha_pattern: {},
  };
  return {
    [CONFIG_FILE]: new TextEncoder().encode(JSON.stringify(config, null, 2)),
    [WEIGHTS_FILE]: encodeSafetensorsRaw(tensors, { format: "pt" }),
  };
}

/** Writes `adapter_config.json` and `adapter_model.safetensors` into `dir` (created). */
export async function savePeftAdapter(
  dir: string,
  model: ModelConfig,
  adapter: PeftAdapter,
  options: { baseModel?: string; dtype?: HfDtype } = {},
): Promise<void> {
  const io = platform.files();
  await io.mkdir(dir);
  for (const [name, bytes] of Object.entries(peftAdapterFiles(model, adapter, options))) {
    const path = dir.endsWith("/") ? dir + name : `${dir}/${name}`;
    await io.writeFile(`${path}.tmp`, bytes);
    await io.rename(`${path}.tmp`, path);
  }
}

function emptyish(v: unknown): boolean {
  return v === undefined || v === null || (typeof v === "object" && Object.keys(v as object).length === 0);
}

/** adapter_config.json → our LoRA config; anything we cannot reproduce exactly is refused by name. */
function parseAdapterConfig(raw: Record<string, unknown>): LoraConfig {
  const bad = (field: string, why: string): never => {
    throw new HfFormatError(CONFIG_FILE, field, why);
  };
  if (raw.peft_type !== "LORA") bad("peft_type", `must be "LORA", got ${JSON.stringify(raw.peft_type)}`);
  if (raw.use_dora === true) bad("use_dora", "DoRA adapters are not supported");
  if (raw.use_rslora === true) bad("use_rslora", "rank-stabilised LoRA is not supported");
  if (raw.fan_in_fan_out === true) bad("fan_in_fan_out", "must be false for Llama/Qwen projections");
  if (raw.bias !== undefined && raw.bias !== "none") bad("bias", `only "none" is supported, got ${JSON.stringify(raw.bias)}`);
  for (const f of ["rank_pattern", "alpha_pattern", "layers_to_transform", "modules_to_save"])
    if (!emptyish(raw[f])) bad(f, "per-layer or per-module settings are not supported");
  const targets = raw.target_modules;
  if (!Array.isArray(targets)) bad("target_modules", "must be a list of module names (a regex string is not supported)");
  for (const t of targets as unknown[])
    if (!LORA_TARGETS.includes(t as LoraTarget))
      bad("target_modules", `unsupported target ${JSON.stringify(t)} (supported: ${LORA_TARGETS.join(", ")})`);
  try {
    return parseLoraConfig({ r: raw.r, alpha: raw.lora_alpha, targetModules: targets });
  } catch (e) {
    throw new HfFormatError(CONFIG_FILE, null, (e as Error).message);
  }
}

/** Loads a PEFT LoRA adapter (ours or one PEFT wrote) for `model`; a rank, shape or target that does not fit is a typed error. */
export async function loadPeftAdapter(source: ModelSource, model: ModelConfig): Promise<PeftAdapter> {
  const files = modelFiles(source, "a PEFT adapter folder");
  const config = parseAdapterConfig(await readJson(files, CONFIG_FILE));
  const reader = await files.open(WEIGHTS_FILE);
  try {
    let header: ReturnType<typeof parseSafetensorsHeader>;
    try {
      const n = safetensorsHeaderLength(await reader.read(0, 8), reader.size);
      header = parseSafetensorsHeader(await reader.read(8, n), reader.size);
    } catch (e) {
      throw new HfFormatError(WEIGHTS_FILE, null, (e as Error).message);
    }
    const params = new Float32Array(loraParamCount(model, config));
    const used = new Set<string>();
    for (const s of loraLayout(model, config)) {
      const name = peftTensorName(s.name);
      // PEFT may save with the adapter's name ("default") in the key; accept both.
      const key = header.tensors[name] ? name : name.replace(/\.weight$/, ".default.weight");
      const e = header.tensors[key];
      if (!e) throw new HfFormatError(WEIGHTS_FILE, name, `missing tensor (needed for ${s.name}): does the adapter fit this base model?`);
      const want = [s.shape[1], s.shape[0]];
      if (JSON.stringify(e.shape) !== JSON.stringify(want))
        throw new HfFormatError(
          WEIGHTS_FILE,
          name,
          `has shape ${JSON.stringify(e.shape)}, this base and r = ${config.r} need ${JSON.stringify(want)}`,
        );
      if (!["F32", "F16", "BF16"].includes(e.dtype)) throw new HfFormatError(WEIGHTS_FILE, name, `unsupported dtype ${e.dtype}`);
      const [begin, end] = e.data_offsets;
      const bytes = await reader.read(header.dataStart + begin, end - begin);
      params.set(convertTensor(bytes, e.dtype as HfDtype, want[0], want[1], true), s.offset);
      used.add(key);
    }
    const extra = Object.keys(header.tensors).filter((k) => !used.has(k));
    if (extra.length)
      throw new HfFormatError(WEIGHTS_FILE, extra[0], `is not part of this adapter's config for this base (${extra.length} such tensors)`);
    return { config, params };
  } finally {
    await reader.close();
  }
}

/** Base weights with the adapter folded in: `W + scaling · lora_a · lora_b` for every targeted projection. */
export function mergeLora(model: ModelConfig, base: ModelParams, adapter: PeftAdapter): ModelWeights {
  const views = paramViews(model, base);
  const merged: ModelWeights = {};
  for (const [name, t] of Object.entries(views)) merged[name] = t;
  const scaling = loraScaling(adapter.config);
  const layout = loraLayout(model, adapter.config);
  for (let i = 0; i < layout.length; i += 2) {
    const a = layout[i];
    const b = layout[i + 1];
    const weight = a.name.replace(/\.lora_a$/, "");
    const [fanIn, r] = a.shape;
    const fanOut = b.shape[1];
    const delta = matmul(adapter.params.subarray(a.offset, a.offset + a.size), adapter.params.subarray(b.offset, b.offset + b.size), {
      m: fanIn,
      k: r,
      n: fanOut,
    });
    const w = Float32Array.from(views[weight]);
    for (let j = 0; j < w.length; j++) w[j] += scaling * delta[j];
    merged[weight] = w;
  }
  return merged;
}
