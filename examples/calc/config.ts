/**
 * The demo's policy size. The `tiny` preset (0.82M parameters) trains at about 250 tokens/s on one CPU
 * core, too slow for SFT plus a GRPO run inside 15 minutes on a 2-core machine; this config keeps the
 * tiny preset's vocabulary and shape rules at a quarter of its width and half its depth (about 0.12M
 * parameters, ~6x fewer FLOPs per token) and a context that fits the short calc prompts.
 */
import { presetConfig, type ModelConfig } from "../../src/model/index.ts";

export const CALC_CONFIG: ModelConfig = {
  ...presetConfig("tiny"),
  d_model: 64,
  n_layers: 2,
  n_heads: 4,
  n_kv_heads: 2,
  d_ff: 192,
  max_seq_len: 64,
};

/** The `tiny` preset itself (0.82M parameters) with the demo's context: `sft.ts --preset tiny`. */
export const CALC_TINY_CONFIG: ModelConfig = { ...presetConfig("tiny"), max_seq_len: CALC_CONFIG.max_seq_len };
