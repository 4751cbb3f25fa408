/**
 * Reading nested values back out of flat dotted span attributes (unflatten, filterAndUnflatten; the
 * encoding is in docs/tracing.md#span-names-attributes-and-emitters). Writers (flatten, sanitize) belong to the tracer.
 */
import { ValidationError } from "./errors.ts";

export type Nested = unknown;

/**
 * Dotted keys to nested objects; a dict whose keys are exactly "0".."n-1" becomes a list.
 * Later keys win: `{"a":1,"a.b":2}` gives `{"a":{"b":2}}`, while `{"a.b":2,"a":1}` gives `{"a":1}` (as upstream).
 */
export function unflatten(flat: Record<string, unknown>): Nested {
  const root: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(flat)) {
    const parts = key.split(".");
    let d = root;
    for (const part of parts.slice(0, -1)) {
      const next = d[part];
      if (typeof next !== "object" || next === null || Array.isArray(next)) d[part] = {};
      d = d[part] as Record<string, unknown>;
    }
    d[parts[parts.length - 1]] = value;
  }
  return listify(root);
}

function listify(v: unknown): unknown {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return v;
  const obj = v as Record<string, unknown>;
  for (const k of Object.keys(obj)) obj[k] = listify(obj[k]);
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
    if (k.startsWith(prefix + ".")) picked[k.slice(prefix.length + 1)] = v;
  }
  return unflatten(picked);
}

/** True for {} and []. */
export function isEmptyNested(v: unknown): boolean {
  if (Array.isArray(v)) return v.length === 0;
  return typeof v === "object" && v !== null && Object.keys(v).length === 0;
}
