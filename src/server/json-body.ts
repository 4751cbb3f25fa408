/**
 * JSON request bodies: refused when nested deeper than MAX_JSON_DEPTH, so no recursive step after the
 * parse (zod, the store's copy, JSON.stringify on the way out) can overflow the stack and turn bad input
 * into a 500, or when an object has more than MAX_JSON_KEYS members, whose parse and copies would hold
 * the event loop for seconds (docs/http-api.md, "Limits"). Both are found by scanning the text before
 * `JSON.parse` (json-scan.ts), so a refused body is never parsed. The store's routes read their bodies
 * through `readBody` (a zod schema) or `readJsonBody` (the raw JSON), and so do the policy server and
 * the LLM proxy (src/proxy/).
 */
import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import type { z } from "zod";
import { LightningError, ValidationError, parseOrThrow } from "../types/index.ts";
import { MAX_JSON_DEPTH } from "../store/owned.ts";
import { HttpProblem } from "./errors.ts";
import { MAX_JSON_KEYS, jsonPathAt, scanJsonLimits } from "./json-scan.ts";

/**
 * A request body is read as JSON only when it declares a JSON Content-Type (`application/json`,
 * `application/*+json`); anything else (a form, `text/plain`) or none is a 415 (docs/departures.md#56:
 * upstream reads a body without one as JSON). A web page can send a form, plain text or a Blob without
 * a type with no CORS preflight (`fetch(url, { mode: "no-cors", body: new Blob([json]) })` declares none);
 * a JSON type it cannot send without one.
 */
export function checkJsonContentType(contentType: string | undefined): void {
  if (contentType === undefined || contentType.trim() === "")
    throw new HttpProblem(415, "UnsupportedMediaType", "The request has a body but no Content-Type: send the body as application/json");
  const media = contentType.split(";")[0]!.trim().toLowerCase();
  if (media === "application/json" || /^application\/[^/]*\+json$/.test(media)) return;
  throw new HttpProblem(415, "UnsupportedMediaType", `Content-Type '${contentType}' is not JSON: send the body as application/json`);
}

/** `JSON.parse(text)`, with a ValidationError for malformed JSON and for a body past either limit. */
export function parseJsonBody(text: string, what = "request body"): unknown {
  const breach = scanJsonLimits(text, MAX_JSON_DEPTH, MAX_JSON_KEYS);
  if (breach !== null) {
    const [detail, message] =
      breach.limit === "depth"
        ? [`is nested more than ${MAX_JSON_DEPTH} levels deep (arrays and objects)`, `nested more than ${MAX_JSON_DEPTH} levels deep`]
        : [`has an object with more than ${MAX_JSON_KEYS} keys`, `an object with more than ${MAX_JSON_KEYS} keys`];
    throw new ValidationError(`The ${what} ${detail}`, [{ path: jsonPathAt(text, breach.at), message }]);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new ValidationError(`Malformed JSON in ${what}: ${e instanceof Error ? e.message : String(e)}`, []);
  }
}

/** A request's JSON body; an empty one is `undefined` when `optional`, a 400 otherwise. */
export async function readJsonBody(c: Context, optional: boolean): Promise<unknown> {
  let text: string;
  try {
    text = await c.req.text();
  } catch (e) {
    throw unreadableBody(e);
  }
  if (text.trim() === "") {
    if (optional) return undefined;
    throw new ValidationError("A JSON request body is required", []);
  }
  checkJsonContentType(c.req.header("content-type"));
  return parseJsonBody(text);
}

/** The JSON body parsed with a (strict) schema; a missing body counts as `{}` when `optional`. */
export async function readBody<T extends z.ZodType>(c: Context, schema: T, optional = false): Promise<z.infer<T>> {
  const raw = await readJsonBody(c, optional);
  return parseOrThrow(schema, raw === undefined || raw === null ? (optional ? {} : raw) : raw, "request body");
}

/**
 * A failed read of a request body: the body limit's own 413 as it is; anything else is a body that never
 * fully arrived (the client closed the connection mid-upload, a broken chunked encoding), which is the
 * client's failure (400), not a server error.
 */
export function unreadableBody(e: unknown): unknown {
  if (e instanceof LightningError || e instanceof HTTPException) return e;
  return new HttpProblem(400, "UnreadableBody", `The request body could not be read: ${e instanceof Error ? e.message : String(e)}`, {
    cause: e,
  });
}
