import { paramCount, paramLayout, type ModelConfig, type ParamSpec } from "./config.ts";
import { ValidationError } from "../types/errors.ts";
import type { Arr } from "./reference/ops.ts";

/** Named views into one flat parameter (or gradient, or optimizer-moment) buffer, in layout order. */
export type ParamViews<A extends Arr = Float32Array> = Record<string, A>;

/**
 * Views (no copies) of each tensor of `params`, keyed by name; writes through a view change `params`.
 * `params` is the flat buffer in layout order, or tensors by name (checked: every layout tensor present
 * with its element count, no unknown names).
 */
export function paramViews<A extends Arr>(config: ModelConfig, params: A | Record<string, A>): ParamViews<A> {
  return tensorViews(paramLayout(config), params, { what: "parameter buffer", lacks: "weights lack", owner: "the config", root: "params" });
}

/**
 * Views of `params` (flat in `layout` order, or by name) by tensor name, for any layout (the model's, an
 * adapter's). Errors name the tensor and use `label` to say whose buffer is wrong.
 */
export function tensorViews<A extends Arr>(
  layout: readonly ParamSpec[],
  params: A | Record<string, A>,
  label: { what: string; lacks: string; owner: string; root: string },
): Record<string, A> {
  if (!ArrayBuffer.isView(params)) {
    const byName = params as Record<string, A>;
    for (const s of layout) {
      const t = byName[s.name];
      if (t === undefined) throw new ValidationError(`${label.lacks} tensor ${s.name}`, [label.root, s.name]);
      if (t.length !== s.size)
        throw new ValidationError(`tensor ${s.name} has ${t.length} elements, ${label.owner} needs ${s.size} (${s.shape.join("x")})`, [
          label.root,
          s.name,
        ]);
    }
    const known = new Set(layout.map((s) => s.name));
    for (const name of Object.keys(byName))
      if (!known.has(name)) throw new ValidationError(`tensor ${name} is not part of ${label.owner}'s layout`, [label.root, name]);
    return { ...byName };
  }
  const flat = params as A;
  const total = layout.reduce((a, s) => a + s.size, 0);
  if (flat.length !== total)
    throw new ValidationError(`${label.what} has ${flat.length} elements, ${label.owner} needs ${total}`, [label.root]);
  const views: Record<string, A> = {};
  for (const s of layout) views[s.name] = flat.subarray(s.offset, s.offset + s.size) as A;
  return views;
}

/** One flat buffer (layout order) holding `params`: the buffer itself when already flat, else a copy. */
export function flattenParams(config: ModelConfig, params: ModelParams): Float32Array {
  if (params instanceof Float32Array) {
    paramViews(config, params);
    return params;
  }
  const views = paramViews(config, params);
  const flat = new Float32Array(paramCount(config));
  for (const s of paramLayout(config)) flat.set(views[s.name], s.offset);
  return flat;
}

/**
 * A model's weights as separate tensors keyed by layout name (what the Hugging Face loader returns:
 * no single flat buffer, so models over 4 GiB of float32 fit, and tensors can be replaced one by one).
 */
export type ModelWeights = Record<string, Float32Array>;

/** Either form of a model's parameters: one flat buffer in layout order, or tensors by name. */
export type ModelParams = Float32Array | ModelWeights;
