/** Random-checkpoint shapes the benchmarks share: the Hugging Face config numbers of two real models. */
import { parseModelConfig, type ModelConfig } from "../src/model/config.ts";

export const SHAPES: Record<string, ModelConfig> = {
  "smollm2-135m": parseModelConfig({
    vocab_size: 49152,
    d_model: 576,
    n_layers: 30,
    n_heads: 9,
    n_kv_heads: 3,
    d_ff: 1536,
    max_seq_len: 8192,
    rope_theta: 100000,
    norm_eps: 1e-5,
    tie_embeddings: true,
  }),
  "qwen2.5-0.5b": parseModelConfig({
    vocab_size: 151936,
    d_model: 896,
    n_layers: 24,
    n_heads: 14,
    n_kv_heads: 2,
    d_ff: 4864,
    max_seq_len: 32768,
    rope_theta: 1000000,
    norm_eps: 1e-6,
    tie_embeddings: true,
    qkv_bias: true,
  }),
};
