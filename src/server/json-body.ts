/**
 * JSON request bodies: refused when nested deeper than MAX_JSON_DEPTH, so no recursive step after the
 * parse (zod, the store's copy, JSON.stringify on the way out) can overflow the stack and turn bad input
 * into a 500, or when an object has more than MAX_JSON_KEYS members, whose parse and copies would hold
 * the event loop for seconds (docs/http-api.md, "Limits"). Both are found by scanning the text before
 * `JSON.parse` (json-scan.ts), so a refused body is never parsed.
 */
import { ValidationError } from "../types/index.ts";
import { MAX_JSON_DEPTH } from "../store/owned.ts";
import { HttpProblem } from "./errors.ts";
import { MAX_JSON_KEYS, jsonPathAt, scanJsonLimits } from "./json-scan.ts";

/**
 * A request body is read as JSON when it declares no Content-Type or a JSON one (`application/json`,
 * `application/*+json`), as upstream does; anything else (a form, `text/plain`) is a 415, so a web page
 * cannot post data to the store with a form or a plain-text request that skips the CORS preflight.
 */
export function checkJsonContentType(contentType: string | undefined): void {
  if (contentType === undefined) return;
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
