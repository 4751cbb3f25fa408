import { paramLayout, paramCount, type ModelConfig } from "./config.ts";
import { ValidationError } from "../types/errors.ts";
import type { Arr } from "./reference/ops.ts";

/** Named views into one flat parameter (or gradient, or optimizer-moment) buffer, in layout order. */
export type ParamViews<A extends Arr = Float32Array> = Record<string, A>;

/** Views (no copies) of each tensor of `flat`, keyed by name; writes through a view change `flat`. */
export function paramViews<A extends Arr>(config: ModelConfig, flat: A): ParamViews<A> {
  const total = paramCount(config);
  if (flat.length !== total)
    throw new ValidationError(`parameter buffer has ${flat.length} elements, the config needs ${total}`, ["params"]);
  const views: ParamViews<A> = {};
  for (const s of paramLayout(config)) views[s.name] = flat.subarray(s.offset, s.offset + s.size) as A;
  return views;
}

/**
 * A model's weights as separate tensors keyed by layout name (what the Hugging Face loader returns:
 * no single flat buffer, so models over 4 GiB of float32 fit, and tensors can be replaced one by one).
 */
export type ModelWeights = Record<string, Float32Array>;

/** Either form of a model's parameters: one flat buffer in layout order, or tensors by name. */
export type ModelParams = Float32Array | ModelWeights;
