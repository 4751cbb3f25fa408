/**
 * Page sizes of the list routes (docs/departures.md#22): a request without `limit` gets the default page,
 * `limit=-1` ("everything") and any limit above the maximum get the maximum page. The answer keeps
 * upstream's envelope `{items, limit, offset, total}`, whose `limit` is the page size actually used, so a
 * caller sees from `total` that more is left and asks again with a larger `offset`.
 *
 * A large page is written item by item into a stream instead of as one JSON string, and it ends early
 * once it holds MAX_PAGE_CHARS of JSON: neither the server nor a client ever builds one huge string
 * (V8 caps one at about 512 MiB), and the first bytes leave before the last item is serialised.
 */
import type { Context } from "hono";
import { ValidationError, type PaginatedResult } from "../types/index.ts";

/** Items of a list answer when the request gives no `limit`. */
export const DEFAULT_PAGE_SIZE = 1_000;
/** Most items one list answer holds (also the most rollouts one dequeue claims). */
export const MAX_PAGE_SIZE = 10_000;
/** Characters of JSON after which a list answer ends its page early (about 64 MiB of ASCII). */
export const MAX_PAGE_CHARS = 64 * 1024 * 1024;

export interface PageSizes {
  defaultSize: number;
  maxSize: number;
  maxChars: number;
}

/** The limit handed to the store for a request's `limit` (0 and invalid values go as given: the store judges them). */
export function pageLimit(asked: number | undefined, sizes: PageSizes): number {
  if (asked === undefined) return sizes.defaultSize;
  if (asked === -1 || asked > sizes.maxSize) return sizes.maxSize;
  return asked;
}

/** A list query as handed to the store: keys whose value is undefined dropped, the limit turned into the page size used. */
export function pagedQuery<Q extends { limit?: number }>(q: Q, sizes: PageSizes): Q {
  const defined = Object.fromEntries(Object.entries(q).filter(([, v]) => v !== undefined)) as Q;
  return { ...defined, limit: pageLimit(q.limit, sizes) };
}

/** Checks the configured sizes once, when the app is built; a maximum below the default page lowers the default too. */
export function pageSizes(defaultSize: number | undefined, maxSize = MAX_PAGE_SIZE, maxChars = MAX_PAGE_CHARS): PageSizes {
  defaultSize ??= Math.min(DEFAULT_PAGE_SIZE, maxSize);
  for (const [name, v] of [
    ["defaultPageSize", defaultSize],
    ["maxPageSize", maxSize],
    ["maxPageChars", maxChars],
  ] as const) {
    if (!Number.isSafeInteger(v) || v < 1) throw new ValidationError(`${name} must be a whole number >= 1, got ${String(v)}`, [name]);
  }
  if (defaultSize > maxSize)
    throw new ValidationError(`defaultPageSize (${defaultSize}) must not exceed maxPageSize (${maxSize})`, ["defaultPageSize"]);
  return { defaultSize, maxSize, maxChars };
}

/** Characters gathered before a chunk is handed to the stream. */
const CHUNK_CHARS = 256 * 1024;

/**
 * The JSON answer for a page: `{"items":[...],"limit":..,"offset":..,"total":..}`. Items are written one
 * by one; an answer that fits in one chunk goes out as one string, a longer one as a stream of chunks.
 * Once the items written pass `maxChars` characters of JSON the page ends there (it holds at least one
 * item), and its `limit` is the number of items it holds, so the caller asks for the rest as for any
 * full page: the answer, and the string a client builds from it, stay bounded whatever the items weigh.
 */
export function pageResponse(c: Context, page: PaginatedResult<unknown>, maxChars: number): Response {
  const { items, offset, total } = page;
  let limit = page.limit;
  let next = 0;
  let written = 0;
  let done = false;
  const nextChunk = (): string => {
    let chunk = next === 0 ? '{"items":[' : "";
    const start = chunk.length;
    let full = false;
    while (next < items.length && chunk.length - start < CHUNK_CHARS) {
      full = next > 0 && written >= maxChars;
      if (full) break;
      const text = JSON.stringify(items[next]);
      chunk += (next === 0 ? "" : ",") + text;
      written += text.length + 1;
      next++;
    }
    if (full) limit = next;
    if (full || next === items.length) {
      chunk += `],"limit":${JSON.stringify(limit)},"offset":${JSON.stringify(offset)},"total":${JSON.stringify(total)}}`;
      done = true;
    }
    return chunk;
  };
  const first = nextChunk();
  if (done) return c.body(first, 200, { "content-type": "application/json" });
  const encoder = new TextEncoder();
  let pending: string | null = first;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      const chunk = pending ?? nextChunk();
      pending = null;
      controller.enqueue(encoder.encode(chunk));
      if (done) controller.close();
    },
  });
  return c.body(body, 200, { "content-type": "application/json" });
}
