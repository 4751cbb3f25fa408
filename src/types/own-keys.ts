/**
 * Objects built from keys that come from outside (request bodies, span attributes, files): every key is
 * an ordinary own property, `"__proto__"`, `"constructor"` and `"prototype"` included. A plain `o[k] = v`
 * with `k === "__proto__"` would set the object's prototype instead (the key vanishes, and the object then
 * inherits from `v`), and a plain `o[k]` read of a key the object lacks finds `Object.prototype`, whose
 * writes reach every object of the process.
 */

/** `o[k] = v` as an own enumerable property, `"__proto__"` included. */
export function setOwn(o: Record<string, unknown>, k: string, v: unknown): void {
  if (k === "__proto__") Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
  else o[k] = v;
}

/** `o[k]` when `k` is an own property of `o`, else undefined (never an inherited value such as `Object.prototype`). */
export const getOwn = (o: object, k: string): unknown => (Object.hasOwn(o, k) ? (o as Record<string, unknown>)[k] : undefined);
