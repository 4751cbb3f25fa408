/**
 * Copies and freezing for store rows. The store never keeps a caller's object (the caller could change
 * it later) and never hands out a live one (DECISIONS row 9): input is copied and frozen on the way in,
 * and the memory backend freezes the rows it builds, so returning a stored row needs no copy.
 */
import { ValidationError } from "../types/index.ts";

const isPlainObject = (v: object): boolean => {
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
};

/**
 * A deep, deeply frozen copy of JSON-like data, in one pass: plain objects and arrays are copied
 * recursively (keys whose value is `undefined` are dropped, as JSON does), primitives kept; other
 * objects (Date, Map, typed arrays) go through structuredClone and are frozen where JS allows it.
 * Empty objects and arrays come back as one shared frozen instance.
 */
/** Shared frozen empties: spans are full of `{}` and `[]`, and fewer live objects mean cheaper GC. */
export const EMPTY_ARRAY: readonly never[] = Object.freeze([]);
export const EMPTY_OBJECT: Readonly<Record<string, never>> = Object.freeze({});

export function ownedCopy<T>(value: T, what = "value"): T {
  if (value === null || typeof value !== "object") {
    if (typeof value === "function" || typeof value === "symbol") {
      throw new ValidationError(`${what} must be data, not a ${typeof value}`, []);
    }
    return value;
  }
  if (Array.isArray(value)) {
    if (value.length === 0) return EMPTY_ARRAY as T;
    const out = new Array(value.length);
    for (let i = 0; i < value.length; i++) out[i] = ownedCopy(value[i], what);
    return Object.freeze(out) as T;
  }
  if (isPlainObject(value)) {
    const out: Record<string, unknown> = {};
    for (const k in value) {
      const v = (value as Record<string, unknown>)[k];
      if (v !== undefined) out[k] = ownedCopy(v, what);
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
