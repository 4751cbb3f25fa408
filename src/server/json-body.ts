/**
 * JSON request bodies: parsed, then refused when nested deeper than MAX_JSON_DEPTH (docs/http-api.md,
 * "Limits"), so no recursive step after it (zod, the store's copy, JSON.stringify on the way out) can
 * overflow the stack and turn bad input into a 500.
 *
 * The check walks the parsed value with an explicit stack. JSON.parse itself does not recurse in V8
 * (Node, Deno) or JavaScriptCore (Bun), and the walk costs about a tenth of the parse of a span batch,
 * where scanning the text for brackets first costs most of a second parse (bench/json-depth.ts). A
 * scan would refuse a 32 MiB body of brackets without parsing it, but parsing that costs no more than
 * parsing a flat 32 MiB body the body limit lets through anyway.
 */
import { ValidationError } from "../types/index.ts";
import { MAX_JSON_DEPTH } from "../store/owned.ts";
import { HttpProblem } from "./errors.ts";

/**
 * A request body is read as JSON only when it declares a JSON Content-Type (`application/json`,
 * `application/*+json`); anything else (a form, `text/plain`) or none is a 415 (docs/departures.md#55:
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

/** `JSON.parse(text)`, with a ValidationError for malformed or too deeply nested JSON. */
export function parseJsonBody(text: string, what = "request body"): unknown {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new ValidationError(`Malformed JSON in ${what}: ${e instanceof Error ? e.message : String(e)}`, []);
  }
  checkJsonDepth(value, what);
  return value;
}

/** Throws a ValidationError naming the path of the first array or object nested deeper than MAX_JSON_DEPTH. */
export function checkJsonDepth(value: unknown, what = "request body", max = MAX_JSON_DEPTH): void {
  if (withinDepth(value, max)) return;
  const path = pathTooDeep(value, max);
  throw new ValidationError(`The ${what} is nested more than ${max} levels deep (arrays and objects)`, [
    { path, message: `nested more than ${max} levels deep` },
  ]);
}

const isContainer = (v: unknown): v is object => typeof v === "object" && v !== null;

/** The cheap pass: an explicit stack of containers and their depths; no paths kept. */
function withinDepth(root: unknown, max: number): boolean {
  if (!isContainer(root)) return true;
  const values: object[] = [root];
  const depths: number[] = [1];
  while (values.length > 0) {
    const v = values.pop()!;
    const depth = depths.pop()!;
    if (depth > max) return false;
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        const x: unknown = v[i];
        if (isContainer(x)) values.push(x), depths.push(depth + 1);
      }
    } else {
      for (const k in v) {
        const x = (v as Record<string, unknown>)[k];
        if (isContainer(x)) values.push(x), depths.push(depth + 1);
      }
    }
  }
  return true;
}

interface Visit {
  value: object;
  depth: number;
  parent: Visit | null;
  key: string | number;
}

/** Only for a refused body: the same walk keeping parent links, to name where the limit was passed. */
function pathTooDeep(root: unknown, max: number): (string | number)[] {
  const stack: Visit[] = [{ value: root as object, depth: 1, parent: null, key: "" }];
  while (stack.length > 0) {
    const visit = stack.pop()!;
    if (visit.depth > max) {
      const path: (string | number)[] = [];
      for (let at: Visit | null = visit; at.parent !== null; at = at.parent) path.push(at.key);
      return path.reverse();
    }
    const entries: [string | number, unknown][] = Array.isArray(visit.value)
      ? visit.value.map((x, i) => [i, x])
      : Object.entries(visit.value);
    for (const [key, x] of entries) if (isContainer(x)) stack.push({ value: x, depth: visit.depth + 1, parent: visit, key });
  }
  return [];
}
