/** GET query parameters read into the same (strict) zod schemas as the JSON bodies of the POST routes. */
import type { Context } from "hono";
import type { z } from "zod";
import { setOwn } from "../types/own-keys.ts";
import { parseOrThrow } from "../types/index.ts";
import { ARRAY_PARAMS, NUMBER_PARAMS } from "./schemas.ts";

/** GET query parameters as an object for a schema: repeated keys as lists, numbers as numbers. */
export function queryParams<T extends z.ZodType>(c: Context, schema: T): z.infer<T> {
  const out: Record<string, unknown> = {};
  for (const [k, values] of Object.entries(c.req.queries())) {
    const v: unknown = ARRAY_PARAMS.has(k) ? values : values[values.length - 1];
    setOwn(out, k, NUMBER_PARAMS.has(k) && typeof v === "string" && v.trim() !== "" && !Number.isNaN(Number(v)) ? Number(v) : v);
  }
  return parseOrThrow(schema, out, "query parameters");
}
