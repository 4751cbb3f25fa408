import type { ModelConfig } from "./config.ts";
import { TOKENIZER_VOCAB_SIZE } from "./tokenizer.ts";

/** Named model sizes. Parameter counts (paramCount): tiny ≈ 0.82M, small ≈ 9.5M, base ≈ 101M. */
export const PRESETS = {
  /** Tests and the CPU demo. */
  tiny: {
    vocab_size: TOKENIZER_VOCAB_SIZE,
    d_model: 128,
    n_layers: 4,
    n_heads: 4,
    n_kv_heads: 2,
    d_ff: 384,
    max_seq_len: 256,
    rope_theta: 10000,
    norm_eps: 1e-5,
    tie_embeddings: true,
  },
  small: {
    vocab_size: TOKENIZER_VOCAB_SIZE,
    d_model: 384,
    n_layers: 6,
    n_heads: 6,
    n_kv_heads: 2,
    d_ff: 1024,
    max_seq_len: 512,
    rope_theta: 10000,
    norm_eps: 1e-5,
    tie_embeddings: true,
  },
  /** GPU benchmarks. */
  base: {
    vocab_size: TOKENIZER_VOCAB_SIZE,
    d_model: 768,
    n_layers: 16,
    n_heads: 12,
    n_kv_heads: 4,
    d_ff: 2048,
    max_seq_len: 1024,
    rope_theta: 10000,
    norm_eps: 1e-5,
    tie_embeddings: true,
  },
} as const satisfies Record<string, ModelConfig>;

export type PresetName = keyof typeof PRESETS;

/** A fresh copy of a preset's config. */
export function presetConfig(name: PresetName): ModelConfig {
  return { ...PRESETS[name] };
}
