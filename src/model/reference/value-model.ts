/**
 * The critic's forward and backward (docs/training.md#the-critic): the decoder (`decoderForward`, the
 * policy's blocks and final norm) and the value head on top, in place of the LM head. Generic over the
 * parameter buffer's element type, like model.ts (Float64Array for gradient checks).
 *
 * The head runs on every position, as Hugging Face's token-classification model does; the value of
 * response token t is read at column P − 1 + t ({@link responseValues}), the hidden state *before* the
 * token, as verl's critic reads `values[:, -R-1:-1]`: V(s_t) of the state in which token t is chosen.
 */
import type { ModelConfig } from "../config.ts";
import { decoderConfig, splitValueParams, valueParamCount } from "../value-params.ts";
import type { ModelOps } from "../model-ops.ts";
import { decoderBackward, decoderForward, inputShape, type DecoderCache, type ModelInput } from "./model.ts";
import { alloc, type Arr } from "./ops.ts";
import { valueHeadBackward, valueHeadForward } from "./value-head.ts";

export interface ValueForwardResult<A extends Arr> {
  /** [B, T] the value head's output at every position. */
  values: A;
  cache: DecoderCache;
}

/** Runs the critic on a batch; `params` is its flat buffer in `valueLayout(config)` order. */
export function valueForward<A extends Arr>(
  config: ModelConfig,
  params: A,
  input: ModelInput,
  options: { ops?: ModelOps } = {},
): ValueForwardResult<A> {
  const { decoder, weight, bias } = splitValueParams(config, params);
  const { hidden, cache } = decoderForward(decoderConfig(config), decoder, input, options);
  const { B, T } = inputShape(input);
  return { values: valueHeadForward(hidden, weight, bias[0], B * T, config.d_model) as A, cache };
}

/**
 * Gradients of a scalar loss with respect to every critic parameter, given dL/dvalue per position
 * ([B, T], aligned with {@link valueForward}'s `values`): a flat buffer in `valueLayout` order.
 */
export function valueBackward<A extends Arr>(config: ModelConfig, params: A, cache: DecoderCache, dValues: ArrayLike<number>): A {
  const { decoder, weight } = splitValueParams(config, params);
  const { B, T } = inputShape(cache.input);
  const head = valueHeadBackward(cache.hFinal, weight, dValues, B * T, config.d_model);
  const grads = alloc(params, valueParamCount(config)) as A;
  grads.set(decoderBackward(decoderConfig(config), decoder, cache, head.dh));
  grads.set(head.dw, decoder.length);
  grads[decoder.length + config.d_model] = head.db;
  return grads;
}

/** [n, R] values of the response tokens from per-position values [n, P + R]: column P − 1 + t for token t. */
export function responseValues(perPosition: ArrayLike<number>, n: number, P: number, R: number): Float32Array {
  const out = new Float32Array(n * R);
  for (let i = 0; i < n; i++) for (let t = 0; t < R; t++) out[i * R + t] = perPosition[i * (P + R) + P - 1 + t];
  return out;
}

/** The inverse of {@link responseValues} for gradients: [n, R] onto [n, P + R], other columns 0. */
export function positionGradients(dResponse: ArrayLike<number>, n: number, P: number, R: number): Float64Array {
  const out = new Float64Array(n * (P + R));
  for (let i = 0; i < n; i++) for (let t = 0; t < R; t++) out[i * (P + R) + P - 1 + t] = dResponse[i * R + t];
  return out;
}
