/** A tiny preset model whose logits make one id far more likely than any other, at every position. */
import { initParams, paramViews, presetConfig, type ModelConfig } from "../../src/model/index.ts";

/**
 * Tied embeddings: every row gets a large first coordinate, so the final hidden state leans along it
 * whatever the input; `id`'s row is that axis scaled far up, so its logit dwarfs every other one.
 */
export function favouredModel(id: number, seed = 5): { config: ModelConfig; params: Float32Array } {
  const config = { ...presetConfig("tiny"), max_seq_len: 48 };
  const params = initParams(config, seed);
  const E = paramViews(config, params).tok_embeddings;
  const d = config.d_model;
  for (let r = 0; r < config.vocab_size; r++) E[r * d] = 1;
  E.fill(0, id * d, (id + 1) * d);
  E[id * d] = 20;
  return { config, params };
}
