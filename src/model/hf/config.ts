/**
 * `config.json` of LlamaForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM ↔ our {@link ModelConfig}.
 * Defaults are those of Hugging Face's config classes for each architecture (docs/hf-models.md
 * lists the fields read and the mapping).
 */
import { parseModelConfig, type ModelConfig, type RopeScaling } from "../config.ts";
import { HfFormatError } from "./errors.ts";

export const ARCHITECTURES = ["LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"] as const;
export type HfArchitecture = (typeof ARCHITECTURES)[number];

const FILE = "config.json";

/** What the config says beyond the model's shape. */
export interface HfModelInfo {
  architecture: HfArchitecture;
  config: ModelConfig;
  /** `eos_token_id` etc. from config.json (generation_config.json overrides them). */
  eosTokenIds: number[];
  bosTokenId: number | null;
  padTokenId: number | null;
}

function int(raw: Record<string, unknown>, field: string, fallback?: number): number {
  const v = raw[field] ?? fallback;
  if (v === undefined || v === null) throw new HfFormatError(FILE, field, "missing");
  if (!(typeof v === "number" && Number.isInteger(v) && v > 0))
    throw new HfFormatError(FILE, field, `must be a positive integer, got ${JSON.stringify(v)}`);
  return v;
}

function num(raw: Record<string, unknown>, field: string, fallback: number): number {
  const v = raw[field] ?? fallback;
  if (!(typeof v === "number" && Number.isFinite(v) && v > 0))
    throw new HfFormatError(FILE, field, `must be a positive number, got ${JSON.stringify(v)}`);
  return v;
}

function bool(raw: Record<string, unknown>, field: string, fallback: boolean): boolean {
  const v = raw[field] ?? fallback;
  if (typeof v !== "boolean") throw new HfFormatError(FILE, field, `must be true or false, got ${JSON.stringify(v)}`);
  return v;
}

/** One id or a list of ids (`eos_token_id` may be either); null/absent gives []. */
export function tokenIds(value: unknown, file: string, field: string): number[] {
  if (value === undefined || value === null) return [];
  const list = Array.isArray(value) ? value : [value];
  for (const id of list)
    if (!(typeof id === "number" && Number.isInteger(id) && id >= 0))
      throw new HfFormatError(file, field, `not a token id: ${JSON.stringify(id)}`);
  return list as number[];
}

/** `rope_scaling` (or transformers 5's `rope_parameters`): none/default, or llama3. */
function ropeScaling(raw: Record<string, unknown>): { scaling: RopeScaling | null; theta: number | undefined } {
  const params = (raw.rope_parameters ?? raw.rope_scaling) as Record<string, unknown> | null | undefined;
  const field = raw.rope_parameters !== undefined ? "rope_parameters" : "rope_scaling";
  if (params === undefined || params === null) return { scaling: null, theta: undefined };
  if (typeof params !== "object") throw new HfFormatError(FILE, field, "must be an object or null");
  const type = params.rope_type ?? params.type ?? "default";
  const theta = typeof params.rope_theta === "number" ? params.rope_theta : undefined;
  if (type === "default") return { scaling: null, theta };
  if (type !== "llama3")
    throw new HfFormatError(FILE, `${field}.rope_type`, `unsupported rope type ${JSON.stringify(type)} (supported: default, llama3)`);
  const n = (k: string): number => {
    const v = params[k];
    if (!(typeof v === "number" && v > 0))
      throw new HfFormatError(FILE, `${field}.${k}`, `must be a positive number, got ${JSON.stringify(v)}`);
    return v;
  };
  return {
    scaling: {
      rope_type: "llama3",
      factor: n("factor"),
      low_freq_factor: n("low_freq_factor"),
      high_freq_factor: n("high_freq_factor"),
      original_max_position_embeddings: n("original_max_position_embeddings"),
    },
    theta,
  };
}

/** Reads a parsed config.json; `maxSeqLen` caps the context (default: max_position_embeddings). */
export function parseHfConfig(raw: Record<string, unknown>, options: { maxSeqLen?: number } = {}): HfModelInfo {
  const archs = raw.architectures;
  const architecture = Array.isArray(archs) ? archs[0] : undefined;
  if (!ARCHITECTURES.includes(architecture as HfArchitecture))
    throw new HfFormatError(
      FILE,
      "architectures",
      `unsupported architecture ${JSON.stringify(architecture ?? null)} (supported: ${ARCHITECTURES.join(", ")})`,
    );
  const arch = architecture as HfArchitecture;
  const act = raw.hidden_act ?? "silu";
  if (act !== "silu") throw new HfFormatError(FILE, "hidden_act", `unsupported activation ${JSON.stringify(act)} (only silu)`);
  if (raw.mlp_bias === true) throw new HfFormatError(FILE, "mlp_bias", "MLP biases are not supported");
  if (raw.use_sliding_window === true) throw new HfFormatError(FILE, "use_sliding_window", "sliding-window attention is not supported");
  // Llama's and Qwen3's attention_bias also biases o_proj, which our layout has no tensor for.
  if (arch !== "Qwen2ForCausalLM" && raw.attention_bias === true)
    throw new HfFormatError(FILE, "attention_bias", "attention biases (including o_proj's) are not supported for this architecture");
  const heads = int(raw, "num_attention_heads");
  const hidden = int(raw, "hidden_size");
  const { scaling, theta } = ropeScaling(raw);
  const maxPositions = int(raw, "max_position_embeddings", arch === "LlamaForCausalLM" ? 2048 : 32768);
  const config = {
    vocab_size: int(raw, "vocab_size"),
    d_model: hidden,
    n_layers: int(raw, "num_hidden_layers"),
    n_heads: heads,
    n_kv_heads: int(raw, "num_key_value_heads", heads),
    d_ff: int(raw, "intermediate_size"),
    max_seq_len: Math.min(maxPositions, options.maxSeqLen ?? maxPositions),
    rope_theta: theta ?? num(raw, "rope_theta", 10000),
    norm_eps: num(raw, "rms_norm_eps", 1e-6),
    tie_embeddings: bool(raw, "tie_word_embeddings", false),
    // Llama and Qwen2 default head_dim to hidden / heads; Qwen3Config's default is a fixed 128.
    ...(raw.head_dim !== undefined && raw.head_dim !== null
      ? { head_dim: int(raw, "head_dim") }
      : arch === "Qwen3ForCausalLM"
        ? { head_dim: 128 }
        : {}),
    ...(arch === "Qwen2ForCausalLM" ? { qkv_bias: true } : {}),
    ...(arch === "Qwen3ForCausalLM" ? { qk_norm: true } : {}),
    rope_scaling: scaling,
  };
  let parsed: ModelConfig;
  try {
    parsed = parseModelConfig(config);
  } catch (e) {
    throw new HfFormatError(FILE, null, (e as Error).message);
  }
  const optionalId = (field: string): number | null => tokenIds(raw[field], FILE, field)[0] ?? null;
  return {
    architecture: arch,
    config: parsed,
    eosTokenIds: tokenIds(raw.eos_token_id, FILE, "eos_token_id"),
    bosTokenId: optionalId("bos_token_id"),
    padTokenId: optionalId("pad_token_id"),
  };
}

/** The architecture that holds a config: Qwen3 for qk-norm, Qwen2 for q/k/v biases, Llama otherwise. */
export function architectureFor(c: ModelConfig): HfArchitecture {
  if (c.qk_norm && c.qkv_bias) throw new HfFormatError(FILE, null, "no supported architecture has both q/k/v biases and qk-norm");
  return c.qk_norm ? "Qwen3ForCausalLM" : c.qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
}

const MODEL_TYPES: Record<HfArchitecture, string> = { LlamaForCausalLM: "llama", Qwen2ForCausalLM: "qwen2", Qwen3ForCausalLM: "qwen3" };

/** config.json for a config (the inverse of {@link parseHfConfig}). */
export function toHfConfig(
  c: ModelConfig,
  extra: {
    architecture?: HfArchitecture;
    torchDtype?: string;
    eosTokenIds?: number[];
    bosTokenId?: number | null;
    padTokenId?: number | null;
  } = {},
): Record<string, unknown> {
  const architecture = extra.architecture ?? architectureFor(c);
  const eos = extra.eosTokenIds ?? [];
  return {
    architectures: [architecture],
    model_type: MODEL_TYPES[architecture],
    vocab_size: c.vocab_size,
    hidden_size: c.d_model,
    num_hidden_layers: c.n_layers,
    num_attention_heads: c.n_heads,
    num_key_value_heads: c.n_kv_heads,
    head_dim: c.head_dim ?? c.d_model / c.n_heads,
    intermediate_size: c.d_ff,
    hidden_act: "silu",
    max_position_embeddings: c.max_seq_len,
    rms_norm_eps: c.norm_eps,
    rope_theta: c.rope_theta,
    rope_scaling: c.rope_scaling ?? null,
    tie_word_embeddings: c.tie_embeddings,
    attention_bias: false,
    ...(architecture === "LlamaForCausalLM" ? { mlp_bias: false } : { use_sliding_window: false }),
    ...(extra.bosTokenId !== undefined && extra.bosTokenId !== null ? { bos_token_id: extra.bosTokenId } : {}),
    ...(eos.length ? { eos_token_id: eos.length === 1 ? eos[0] : eos } : {}),
    ...(extra.padTokenId !== undefined && extra.padTokenId !== null ? { pad_token_id: extra.padTokenId } : {}),
    torch_dtype: extra.torchDtype ?? "float32",
  };
}
