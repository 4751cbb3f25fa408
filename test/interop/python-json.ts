/**
 * JSON text exactly as Python's `json.dumps` writes it with its defaults (what aiohttp sends for
 * `json=`): `", "` and `": "` separators, every character outside printable ASCII escaped, and floats
 * written as floats (`1.0`, not `1`). JavaScript numbers do not know int from float, so a float that
 * happens to be whole is marked with `pyFloat`.
 */

/** A Python float (`1.0` stays `1.0` on the wire). */
export class PyFloat {
  constructor(readonly value: number) {}
}

export const pyFloat = (value: number): PyFloat => new PyFloat(value);

/** `repr(float)`: the shortest round-trip digits, as JavaScript, but always with a fraction or exponent. */
function floatRepr(x: number): string {
  if (Number.isNaN(x)) return "NaN";
  if (!Number.isFinite(x)) return x > 0 ? "Infinity" : "-Infinity";
  if (Number.isInteger(x) && Math.abs(x) < 1e16) return `${x}.0`;
  // Python writes exponents with a sign and two digits at least: 1e-07, 1e+16.
  return String(x)
    .replace(/e([+-])(\d)$/, "e$10$2")
    .replace(/e(\d)/, "e+$1");
}

/** A string literal with `ensure_ascii=True`. */
function strRepr(s: string): string {
  return JSON.stringify(s).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** `json.dumps(value)`. Objects keep their key order, as Python dicts do. */
export function pyDumps(value: unknown): string {
  if (value === null || value === undefined) return "null";
  if (value instanceof PyFloat) return floatRepr(value.value);
  switch (typeof value) {
    case "boolean":
      return value ? "true" : "false";
    case "number":
      if (!Number.isInteger(value)) return floatRepr(value);
      return String(value);
    case "string":
      return strRepr(value);
    case "object":
      if (Array.isArray(value)) return `[${value.map(pyDumps).join(", ")}]`;
      return `{${Object.entries(value as Record<string, unknown>)
        .map(([k, v]) => `${strRepr(k)}: ${pyDumps(v)}`)
        .join(", ")}}`;
    default:
      throw new TypeError(`Object of type ${typeof value} is not JSON serializable`);
  }
}
