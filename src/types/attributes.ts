/**
 * Reading nested values back out of flat dotted span attributes (unflatten, filterAndUnflatten; the
 * encoding is in docs/tracing.md#span-names-attributes-and-emitters). Writers (flatten, sanitize) belong to the tracer.
 */
import { ValidationError } from "./errors.ts";
import { getOwn, setOwn } from "./own-keys.ts";

export type Nested = unknown;

/**
 * Dotted keys to nested objects; a dict whose keys are exactly "0".."n-1" becomes a list.
 * Later keys win: `{"a":1,"a.b":2}` gives `{"a":{"b":2}}`, while `{"a.b":2,"a":1}` gives `{"a":1}` (as upstream).
 * Key segments are data: `a.__proto__.b` gives `{"a":{"__proto__":{"b":...}}}` with `__proto__` an own key,
 * and nothing is read from or written to a prototype (docs/tracing.md).
 */
export function unflatten(flat: Record<string, unknown>): Nested {
  const root: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(flat)) {
    const parts = key.split(".");
    let d = root;
    for (const part of parts.slice(0, -1)) {
      let next = getOwn(d, part);
      if (typeof next !== "object" || next === null || Array.isArray(next)) setOwn(d, part, (next = {}));
      d = next as Record<string, unknown>;
    }
    setOwn(d, parts[parts.length - 1], value);
  }
  return listify(root);
}

function listify(v: unknown): unknown {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return v;
  const obj = v as Record<string, unknown>;
  for (const k of Object.keys(obj)) setOwn(obj, k, listify(obj[k]));
  const keys = Object.keys(obj);
  if (keys.length === 0 || !keys.every((k) => /^\d+$/.test(k))) return obj;
  const idx = keys.map(Number).sort((a, b) => a - b);
  if (!idx.every((n, i) => n === i)) return obj;
  return idx.map((i) => obj[String(i)]);
}

/** The attributes under `prefix.`, unflattened. A key exactly equal to `prefix` is an error. */
export function filterAndUnflatten(attrs: Record<string, unknown>, prefix: string): Nested {
  const picked: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(attrs)) {
    if (k === prefix) throw new ValidationError(`Attribute '${prefix}' must not be set directly; it is a prefix`, [prefix]);
    if (k.startsWith(prefix + ".")) setOwn(picked, k.slice(prefix.length + 1), v);
  }
  return unflatten(picked);
}

/** True for {} and []. */
export function isEmptyNested(v: unknown): boolean {
  if (Array.isArray(v)) return v.length === 0;
  return typeof v === "object" && v !== null && Object.keys(v).length === 0;
}
