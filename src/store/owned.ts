/**
 * Copies and freezing for store rows. The store never keeps a caller's object (the caller could change
 * it later) and never hands out a live one (docs/departures.md#9): input is copied and frozen on the way in,
 * and the memory backend freezes the rows it builds, so returning a stored row needs no copy.
 */
import { z } from "zod";
import { ValidationError } from "../types/index.ts";
import { setOwn } from "../types/own-keys.ts";

const isPlainObject = (v: object): boolean => {
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
};

/**
 * Deepest nesting of arrays and objects the store takes in caller data (docs/departures.md, "Limits and
 * defaults"): `[]` is one level, `[[]]` two. Deeper data is a ValidationError, never a stack overflow in
 * the copy, the JSON writer or a reader.
 */
export const MAX_JSON_DEPTH = 512;

/** Shared frozen empties: spans are full of `{}` and `[]`, and fewer live objects mean cheaper GC. */
export const EMPTY_ARRAY: readonly never[] = Object.freeze([]);
export const EMPTY_OBJECT: Readonly<Record<string, never>> = Object.freeze({});

/**
 * A deep, deeply frozen copy of JSON-like data, in one pass: plain objects and arrays are copied
 * recursively (keys whose value is `undefined` are dropped, as JSON does; `"__proto__"` stays an
 * ordinary key), primitives kept; other objects (Date, Map, typed arrays) go through structuredClone
 * and are frozen where JS allows it. Empty objects and arrays come back as one shared frozen instance.
 * Data nested deeper than MAX_JSON_DEPTH is a ValidationError (the recursion stops there).
 */
export function ownedCopy<T>(value: T, what = "value"): T {
  return copyAt(value, what, 1);
}

function copyAt<T>(value: T, what: string, depth: number): T {
  if (value === null || typeof value !== "object") {
    if (typeof value === "function" || typeof value === "symbol") {
      throw new ValidationError(`${what} must be data, not a ${typeof value}`, []);
    }
    return value;
  }
  if (depth > MAX_JSON_DEPTH) throw tooDeep(what);
  if (Array.isArray(value)) {
    if (value.length === 0) return EMPTY_ARRAY as T;
    const out = new Array(value.length);
    for (let i = 0; i < value.length; i++) out[i] = copyAt(value[i], what, depth + 1);
    return Object.freeze(out) as T;
  }
  if (isPlainObject(value)) {
    const out: Record<string, unknown> = {};
    for (const k in value) {
      const v = (value as Record<string, unknown>)[k];
      if (v !== undefined) setOwn(out, k, copyAt(v, what, depth + 1));
    }
    for (const _ in out) return Object.freeze(out) as T;
    return EMPTY_OBJECT as T;
  }
  let copy: T;
  try {
    copy = structuredClone(value);
  } catch (e) {
    throw new ValidationError(`${what} cannot be copied: ${(e as Error).message}`, []);
  }
  return ArrayBuffer.isView(copy) ? copy : Object.freeze(copy);
}

const tooDeep = (what: string): ValidationError =>
  new ValidationError(`${what} is nested more than ${MAX_JSON_DEPTH} levels deep (arrays and objects)`, []);

const PROTO = "__proto__";

/**
 * `schema.safeParse(input)` with `"__proto__"` an ordinary key: zod skips that key (it neither checks its
 * value nor keeps it), so where the input has one it is parsed under a stand-in name that no key of the
 * input uses, and the result and the issues get the real name back, in the same place among the keys.
 */
export function safeParseWithProtoKeys<T extends z.ZodType>(
  schema: T,
  input: unknown,
): { success: true; data: z.output<T> } | { success: false; error: z.ZodError } {
  if (!hasKey(input, PROTO, 1)) return schema.safeParse(input);
  // U+2060 (word joiner): JSON.stringify does not escape it, so messages name the stand-in as written.
  let standIn = "\u2060__proto__";
  while (hasKey(input, standIn, 1)) standIn = `\u2060${standIn}`;
  const r = schema.safeParse(renameKey(input, PROTO, standIn, 1));
  if (r.success) return { success: true, data: renameKey(r.data, standIn, PROTO, 1) as z.output<T> };
  const real = <K extends PropertyKey>(k: K) => (k === standIn ? PROTO : k);
  const issues = r.error.issues.map((i) => ({
    ...i,
    path: i.path.map(real),
    message: i.message.replaceAll(standIn, PROTO),
    ...(i.code === "unrecognized_keys" ? { keys: i.keys.map(real) } : {}),
  }));
  return { success: false, error: new z.ZodError(issues as z.core.$ZodIssue[]) };
}

/** True when a plain object in `v` (nested in plain objects and arrays) has the own key `key`. */
function hasKey(v: unknown, key: string, depth: number): boolean {
  if (v === null || typeof v !== "object" || depth > MAX_JSON_DEPTH) return false;
  if (Array.isArray(v)) return v.some((x) => hasKey(x, key, depth + 1));
  if (!isPlainObject(v)) return false;
  if (Object.hasOwn(v, key)) return true;
  for (const k in v) if (hasKey((v as Record<string, unknown>)[k], key, depth + 1)) return true;
  return false;
}

/** `v` with the key `from` of its plain objects renamed `to`, in place among the keys; what holds no such key is shared, not copied. */
function renameKey(v: unknown, from: string, to: string, depth: number): unknown {
  if (v === null || typeof v !== "object" || depth > MAX_JSON_DEPTH) return v;
  if (Array.isArray(v)) {
    let out: unknown[] | null = null;
    v.forEach((x, i) => {
      const y = renameKey(x, from, to, depth + 1);
      if (y !== x) (out ??= [...v])[i] = y;
    });
    return out ?? v;
  }
  if (!isPlainObject(v)) return v;
  const o = v as Record<string, unknown>;
  let changed = Object.hasOwn(o, from);
  const entries = Object.keys(o).map((k): [string, unknown] => {
    const y = renameKey(o[k], from, to, depth + 1);
    if (y !== o[k]) changed = true;
    return [k === from ? to : k, y];
  });
  if (!changed) return v;
  const out: Record<string, unknown> = {};
  for (const [k, y] of entries) setOwn(out, k, y);
  return out;
}

/**
 * Freezes an object and everything reachable from it. It stops at frozen objects: in the store those
 * are `ownedCopy` results or earlier rows, which are frozen all the way down.
 */
export function deepFreeze<T>(value: T): T {
  if (value === null || typeof value !== "object" || Object.isFrozen(value)) return value;
  // Typed arrays cannot be frozen; they stay as the private copy made on the way in.
  if (ArrayBuffer.isView(value)) return value;
  Object.freeze(value);
  if (Array.isArray(value)) {
    for (const v of value) deepFreeze(v);
  } else {
    for (const k in value) deepFreeze((value as Record<string, unknown>)[k]);
  }
  return value;
}
