/**
 * Copies and freezing for store rows. The store never keeps a caller's object (the caller could change
 * it later) and never hands out a live one (DECISIONS row 9): input is copied on the way in, and the
 * memory backend deep-freezes what it keeps, so returning a stored row needs no copy.
 */
import { ValidationError } from "../types/index.ts";

/** Objects frozen by `deepFreeze` (deeply immutable, unlike any object that merely `isFrozen`). */
const frozenByStore = new WeakSet<object>();

const isPlainObject = (v: object): boolean => {
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
};

/**
 * A deep copy of JSON-like data: plain objects and arrays are copied recursively, primitives kept;
 * other objects (Date, Map, typed arrays) go through structuredClone. Subtrees that `deepFreeze` froze
 * are shared, because nobody can change them.
 */
export function ownedCopy<T>(value: T, what = "value"): T {
  if (value === null || typeof value !== "object") {
    if (typeof value === "function" || typeof value === "symbol") {
      throw new ValidationError(`${what} must be data, not a ${typeof value}`, []);
    }
    return value;
  }
  if (frozenByStore.has(value)) return value;
  if (Array.isArray(value)) {
    const out = new Array(value.length);
    for (let i = 0; i < value.length; i++) out[i] = ownedCopy(value[i], what);
    return out as T;
  }
  if (isPlainObject(value)) {
    const out: Record<string, unknown> = {};
    for (const k in value) {
      const v = (value as Record<string, unknown>)[k];
      if (v !== undefined) out[k] = ownedCopy(v, what);
    }
    return out as T;
  }
  try {
    return structuredClone(value);
  } catch (e) {
    throw new ValidationError(`${what} cannot be copied: ${(e as Error).message}`, []);
  }
}

/** Freezes an object and everything reachable from it; stops at subtrees that are already frozen. */
export function deepFreeze<T>(value: T): T {
  if (value === null || typeof value !== "object" || frozenByStore.has(value)) return value;
  // Typed arrays cannot be frozen; they stay as the private copy made on the way in.
  if (ArrayBuffer.isView(value)) return value;
  Object.freeze(value);
  frozenByStore.add(value);
  if (Array.isArray(value)) {
    for (const v of value) deepFreeze(v);
  } else {
    for (const k in value) deepFreeze((value as Record<string, unknown>)[k]);
  }
  return value;
}
