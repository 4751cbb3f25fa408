/**
 * The critic's parameters (docs/training.md#the-critic): a decoder of the policy's architecture without its
 * LM head, then the value head. One flat float32 buffer in {@link valueLayout} order:
 * - the decoder's tensors, in `paramLayout` order without `lm_head` (tied or not, a critic has no LM head);
 * - `value_head.weight` [d, 1] and `value_head.bias` [1] (verl's `score` layer, `nn.Linear(hidden, 1)`).
 *
 * A critic starts from the policy's weights with a fresh head ({@link valueParamsFromPolicy}: verl builds its
 * critic from the actor's checkpoint), or from a seeded init of any config ({@link initValueParams}).
 * Fresh heads follow Hugging Face's init of that layer: weight N(0, 0.02), bias 0.
 */
import { paramCount, paramLayout, type ModelConfig, type ParamSpec } from "./config.ts";
import { INIT_STD, initParams, Rng, splitmix32Finalize } from "./init.ts";
import { paramViews, tensorViews, type ModelParams } from "./params.ts";
import type { Arr } from "./reference/ops.ts";

export const VALUE_HEAD_WEIGHT = "value_head.weight";
export const VALUE_HEAD_BIAS = "value_head.bias";

/** The config whose layout is the critic's decoder: the same model with no separate LM head. */
export function decoderConfig(config: ModelConfig): ModelConfig {
  return { ...config, tie_embeddings: true };
}

/** Names, shapes and offsets of the critic's tensors in its flat buffer. */
export function valueLayout(config: ModelConfig): ParamSpec[] {
  const decoder = paramLayout(decoderConfig(config));
  const offset = paramCount(decoderConfig(config));
  const d = config.d_model;
  return [
    ...decoder,
    { name: VALUE_HEAD_WEIGHT, shape: [d, 1], size: d, offset },
    { name: VALUE_HEAD_BIAS, shape: [1], size: 1, offset: offset + d },
  ];
}

/** Elements of the critic's flat buffer. */
export function valueParamCount(config: ModelConfig): number {
  return paramCount(decoderConfig(config)) + config.d_model + 1;
}

/** The decoder's part of a critic buffer (a view, decoderConfig's layout) and the head's tensors. */
export function splitValueParams<A extends Arr>(config: ModelConfig, params: A): { decoder: A; weight: A; bias: A } {
  const views = tensorViews(valueLayout(config), params, {
    what: "critic parameter buffer",
    lacks: "critic weights lack",
    owner: "the critic's config",
    root: "params",
  });
  return {
    decoder: params.subarray(0, paramCount(decoderConfig(config))) as A,
    weight: views[VALUE_HEAD_WEIGHT],
    bias: views[VALUE_HEAD_BIAS],
  };
}

/** Writes a fresh value head (weight N(0, 0.02), bias 0) into the buffer's last d + 1 elements. */
function initValueHead(config: ModelConfig, flat: Float32Array, seed: number): void {
  // a stream of its own: the decoder's init from the same seed starts with the same normals
  const rng = new Rng(splitmix32Finalize((seed ^ 0x76616c75) >>> 0));
  const { weight, bias } = splitValueParams(config, flat);
  for (let i = 0; i < weight.length; i++) weight[i] = rng.normal() * INIT_STD;
  bias[0] = 0;
}

/** A critic initialised from `seed`: the decoder as `initParams` would, and a fresh head. */
export function initValueParams(config: ModelConfig, seed: number): Float32Array {
  const flat = new Float32Array(valueParamCount(config));
  flat.set(initParams(decoderConfig(config), seed));
  initValueHead(config, flat, seed);
  return flat;
}

/**
 * A critic from a policy's weights (flat in `paramLayout(config)` order, or tensors by name as
 * `loadPretrained` gives them, `lm_head` optional): every decoder tensor copied, the LM head dropped, a
 * fresh head from `seed`.
 */
export function valueParamsFromPolicy(config: ModelConfig, policy: ModelParams, seed = 0): Float32Array {
  let views: Record<string, Float32Array>;
  if (policy instanceof Float32Array) views = paramViews(config, policy);
  else {
    const { lm_head: _unused, ...decoder } = policy;
    views = paramViews(decoderConfig(config), decoder);
  }
  const flat = new Float32Array(valueParamCount(config));
  for (const s of paramLayout(decoderConfig(config))) flat.set(views[s.name], s.offset);
  initValueHead(config, flat, seed);
  return flat;
}
