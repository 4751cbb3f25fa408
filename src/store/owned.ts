/**
 * Copies and freezing for store rows. The store never keeps a caller's object (the caller could change
 * it later) and never hands out a live one (docs/departures.md#9): input is copied and frozen on the way in,
 * and the memory backend freezes the rows it builds, so returning a stored row needs no copy.
 */
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

/**
 * `parsed` (what a zod schema made of `input`) with the `"__proto__"` keys of `input` put back, in their
 * place among the input's keys: zod skips that key when it rebuilds a record or a loose object. A key is
 * put back only into objects that kept every other key of their input (records and loose objects; a
 * stripping object drops unknown keys anyway), and only where zod built a new object (values it passed
 * through still have theirs).
 */
export function withProtoKeysOf<T>(input: unknown, parsed: T): T {
  return restoreProtoKeys(input, parsed, 1) as T;
}

function restoreProtoKeys(input: unknown, out: unknown, depth: number): unknown {
  if (input === out || depth > MAX_JSON_DEPTH) return out;
  if (input === null || out === null || typeof input !== "object" || typeof out !== "object" || Object.isFrozen(out)) return out;
  if (Array.isArray(input)) {
    if (Array.isArray(out) && out.length === input.length) input.forEach((v, i) => (out[i] = restoreProtoKeys(v, out[i], depth + 1)));
    return out;
  }
  if (Array.isArray(out) || !isPlainObject(input) || !isPlainObject(out)) return out;
  const i = input as Record<string, unknown>;
  const o = out as Record<string, unknown>;
  for (const k of Object.keys(o)) if (k !== "__proto__" && Object.hasOwn(i, k)) o[k] = restoreProtoKeys(i[k], o[k], depth + 1);
  const keys = Object.keys(i);
  if (!Object.hasOwn(i, "__proto__") || Object.hasOwn(o, "__proto__") || !keys.every((k) => k === "__proto__" || Object.hasOwn(o, k)))
    return out;
  const rebuilt: Record<string, unknown> = {};
  for (const k of keys) setOwn(rebuilt, k, k === "__proto__" ? i[k] : o[k]);
  for (const k of Object.keys(o)) if (!Object.hasOwn(rebuilt, k)) rebuilt[k] = o[k];
  return rebuilt;
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
