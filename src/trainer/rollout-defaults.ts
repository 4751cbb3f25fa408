/**
 * A view of a store whose new rollouts get default config values where the caller gave none: the
 * Trainer hands it to the algorithm so rollouts it enqueues get a default `unresponsive_seconds`
 * (docs/departures.md#21). A value the caller set, `null` included ("no limit"), is kept; everything
 * else goes to the store unchanged.
 */
import type { LightningStore, RolloutOptions, StartRolloutOptions } from "../store/base.ts";
import type { EnqueueRolloutRequest, RolloutConfigInput } from "../types/index.ts";

export interface RolloutConfigDefaults {
  unresponsive_seconds?: number;
}

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function withDefaults(
  config: RolloutConfigInput | null | undefined,
  defaults: RolloutConfigDefaults,
): RolloutConfigInput | null | undefined {
  if (config === null || config === undefined) return { ...defaults };
  // Not an object: the store rejects it with its own error.
  if (!isPlainObject(config)) return config;
  const out: Record<string, unknown> = { ...config };
  for (const [k, v] of Object.entries(defaults)) if (!(k in out)) out[k] = v;
  return out as RolloutConfigInput;
}

function optionsWithDefaults<O extends RolloutOptions>(options: O | undefined, defaults: RolloutConfigDefaults): O | undefined {
  if (options !== undefined && !isPlainObject(options)) return options;
  return { ...(options ?? {}), config: withDefaults(options?.config, defaults) } as O;
}

export function withRolloutDefaults(store: LightningStore, defaults: RolloutConfigDefaults): LightningStore {
  const overrides: Partial<LightningStore> = {
    enqueueRollout: (input: unknown, options?: RolloutOptions) => store.enqueueRollout(input, optionsWithDefaults(options, defaults)),
    startRollout: (input: unknown, options?: StartRolloutOptions) => store.startRollout(input, optionsWithDefaults(options, defaults)),
    enqueueManyRollouts: (requests: EnqueueRolloutRequest[]) =>
      store.enqueueManyRollouts(
        Array.isArray(requests)
          ? requests.map((r) => (isPlainObject(r) ? { ...r, config: withDefaults(r.config, defaults) } : r))
          : requests,
      ),
  };
  const bound = new Map<PropertyKey, unknown>();
  return new Proxy(store, {
    get(target, prop) {
      if (Object.hasOwn(overrides, prop)) return overrides[prop as keyof LightningStore];
      const v: unknown = Reflect.get(target, prop, target);
      if (typeof v !== "function" || prop === "constructor") return v;
      // The store's own methods run with the store as `this` (private fields, class internals).
      let fn = bound.get(prop);
      if (fn === undefined || (fn as { original?: unknown }).original !== v) {
        fn = Object.assign((v as (...a: unknown[]) => unknown).bind(target), { original: v });
        bound.set(prop, fn);
      }
      return fn;
    },
  });
}
