/**
 * Page sizes of the list routes (docs/departures.md#22): a request without `limit` gets the default page,
 * `limit=-1` ("everything") and any limit above the maximum get the maximum page. The answer keeps
 * upstream's envelope `{items, limit, offset, total}`, whose `limit` is the page size actually used, so a
 * caller sees from `total` that more is left and asks again with a larger `offset`.
 *
 * A large page is written item by item into a stream instead of as one JSON string: the answer never
 * has to fit in a single string (V8 caps one at about 512 MiB), and its first bytes leave before its
 * last item is serialised.
 */
import type { Context } from "hono";
import { ValidationError, type PaginatedResult } from "../types/index.ts";

/** Items of a list answer when the request gives no `limit`. */
export const DEFAULT_PAGE_SIZE = 1_000;
/** Most items one list answer holds (also the most rollouts one dequeue claims). */
export const MAX_PAGE_SIZE = 10_000;

export interface PageSizes {
  defaultSize: number;
  maxSize: number;
}

/** The limit handed to the store for a request's `limit` (0 and invalid values go as given: the store judges them). */
export function pageLimit(asked: number | undefined, sizes: PageSizes): number {
  if (asked === undefined) return sizes.defaultSize;
  if (asked === -1 || asked > sizes.maxSize) return sizes.maxSize;
  return asked;
}

/** Checks the configured sizes once, when the app is built; a maximum below the default page lowers the default too. */
export function pageSizes(defaultSize: number | undefined, maxSize = MAX_PAGE_SIZE): PageSizes {
  defaultSize ??= Math.min(DEFAULT_PAGE_SIZE, maxSize);
  for (const [name, v] of [["defaultPageSize", defaultSize], ["maxPageSize", maxSize]] as const) {
    if (!Number.isSafeInteger(v) || v < 1) throw new ValidationError(`${name} must be a whole number >= 1, got ${String(v)}`, [name]);
  }
  if (defaultSize > maxSize) throw new ValidationError(`defaultPageSize (${defaultSize}) must not exceed maxPageSize (${maxSize})`, ["defaultPageSize"]);
  return { defaultSize, maxSize };
}

/** Pages with fewer items go out as one string (c.json): cheaper for the many small answers. */
const STREAM_FROM_ITEMS = 64;
/** Characters gathered before a chunk is handed to the stream. */
const CHUNK_CHARS = 256 * 1024;

/** The JSON answer for a page: `{"items":[...],"limit":..,"offset":..,"total":..}`, streamed when large. */
export function pageResponse(c: Context, page: PaginatedResult<unknown>): Response {
  const { items, limit, offset, total } = page;
  if (items.length < STREAM_FROM_ITEMS) return c.json({ items, limit, offset, total });
  const encoder = new TextEncoder();
  let next = 0;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      let chunk = next === 0 ? '{"items":[' : "";
      while (next < items.length && chunk.length < CHUNK_CHARS) {
        chunk += (next === 0 ? "" : ",") + JSON.stringify(items[next]);
        next++;
      }
      if (next === items.length) chunk += `],"limit":${JSON.stringify(limit)},"offset":${JSON.stringify(offset)},"total":${JSON.stringify(total)}}`;
      controller.enqueue(encoder.encode(chunk));
      if (next === items.length) controller.close();
    },
  });
  return c.body(body, 200, { "content-type": "application/json" });
}
