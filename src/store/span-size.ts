/** A span's size for memory limits (the in-memory store's eviction, the tracer's delivery buffer). */
import type { Span } from "../types/index.ts";

/**
 * The default span size: about the length of its JSON (string lengths in UTF-16 units, 8 bytes per
 * number), computed by a walk that allocates nothing, which is several times cheaper than
 * JSON.stringify on the add-span hot path.
 */
export function jsonSpanSize(span: Span): number {
  return jsonSize(span);
}

function jsonSize(v: unknown): number {
  switch (typeof v) {
    case "string":
      return v.length + 2;
    case "number":
      return 8;
    case "boolean":
      return 5;
    case "object": {
      if (v === null) return 4;
      let n = 2;
      if (Array.isArray(v)) {
        for (let i = 0; i < v.length; i++) n += jsonSize(v[i]) + 1;
      } else {
        for (const k in v) n += k.length + 4 + jsonSize((v as Record<string, unknown>)[k]);
      }
      return n;
    }
    default:
      return 0;
  }
}
