/**
 * The answers of the list routes (docs/http-api.md#list-answers). As upstream, a request without `limit`
 * and `limit=-1` get every match. Page caps are opt-in server settings (`defaultPageSize`, `maxPageSize`,
 * `maxPageChars`); a page one of them cuts short says which in a `truncated_by` key after upstream's
 * envelope `{items, limit, offset, total}`, whose `total` counts every match.
 *
 * An answer is read from the store in batches and written item by item into a stream, so the server holds
 * one batch and one chunk of JSON however many items match, and the first bytes leave before the last
 * item is read. The first read takes FIRST_READ items; each later one as many as hold about READ_CHARS
 * of JSON at the size of the items written so far (at most MAX_READ), so a batch of large items stays
 * small and one of small items saves reads. The batches are separate store reads: the answer ends at the
 * `total` of the first one, and rows added or removed meanwhile can shift later batches, as offset
 * paging does.
 */
import type { Context } from "hono";
import type { LogWriter } from "../platform/log.ts";
import { ValidationError, type PaginatedResult } from "../types/index.ts";

/** Most rollouts one dequeue claims when no `maxPageSize` is set. */
export const MAX_DEQUEUE_SIZE = 10_000;
/** Items of an answer's first store read. */
export const FIRST_READ = 500;
/** Characters of JSON a later read aims at. */
export const READ_CHARS = 4 * 1024 * 1024;
/** Most items of one store read. */
export const MAX_READ = 2_000;
/** Characters gathered before a chunk is handed to the stream. */
const CHUNK_CHARS = 256 * 1024;

/** The opt-in caps; null: none. */
export interface PageSizes {
  /** Items of an answer to a request without `limit`. */
  defaultSize: number | null;
  /** Most items of one answer (`limit=-1` and larger limits get this many). */
  maxSize: number | null;
  /** Characters of JSON after which an answer ends, after at least one item. */
  maxChars: number | null;
}

/** The setting that cut a page short, as the answer names it. */
export type PageCut = "page_size" | "max_page_size" | "max_page_chars";

/** Checks the configured caps once, when the app is built. */
export function pageSizes(defaultSize?: number | null, maxSize?: number | null, maxChars?: number | null): PageSizes {
  const sizes: PageSizes = { defaultSize: defaultSize ?? null, maxSize: maxSize ?? null, maxChars: maxChars ?? null };
  for (const [name, v] of [
    ["defaultPageSize", sizes.defaultSize],
    ["maxPageSize", sizes.maxSize],
    ["maxPageChars", sizes.maxChars],
  ] as const) {
    if (v !== null && (!Number.isSafeInteger(v) || v < 1))
      throw new ValidationError(`${name} must be a whole number >= 1, got ${String(v)}`, [name]);
  }
  if (sizes.defaultSize !== null && sizes.maxSize !== null && sizes.defaultSize > sizes.maxSize)
    throw new ValidationError(`defaultPageSize (${sizes.defaultSize}) must not exceed maxPageSize (${sizes.maxSize})`, ["defaultPageSize"]);
  return sizes;
}

/** The limit a request gets (-1: all) and the cap that set it, if one did. 0 and invalid limits go as given: the store judges them. */
export function plannedLimit(asked: number | undefined, sizes: PageSizes): { limit: number; cap: PageCut | null } {
  if (asked === undefined && sizes.defaultSize !== null) return { limit: sizes.defaultSize, cap: "page_size" };
  const limit = asked ?? -1;
  if (sizes.maxSize !== null && (limit === -1 || limit > sizes.maxSize)) return { limit: sizes.maxSize, cap: "max_page_size" };
  return { limit, cap: null };
}

/** The keys of a query whose value is not undefined (the store's checks read a present key as given). */
function definedKeys<Q extends object>(q: Q): Q {
  return Object.fromEntries(Object.entries(q).filter(([, v]) => v !== undefined)) as Q;
}

interface PageQuery {
  limit?: number;
  offset?: number;
}

/**
 * The JSON answer to a list request: `read` is the store query, called with `query` and a batch's
 * `limit` and `offset`. The first batch is read before answering, so a bad query is still a 4xx; a
 * store error after that ends the stream with an error (logged), never with a well-formed short page.
 */
export async function listAnswer<Q extends PageQuery, T>(
  c: Context,
  query: Q,
  { sizes, log }: { sizes: PageSizes; log: LogWriter },
  read: (query: Q) => Promise<PaginatedResult<T>>,
): Promise<Response> {
  const plan = plannedLimit(query.limit, sizes);
  const base = definedKeys(query);
  let readSize = FIRST_READ;
  const batchLimit = (left: number): number => (left < 0 || left > readSize ? readSize : left);
  const first = await read({ ...base, limit: plan.limit === -1 || plan.limit > 0 ? batchLimit(plan.limit) : plan.limit });
  const { offset, total } = first;
  const start = Math.max(0, offset);
  // Items the answer may hold: the plan's limit, and no more than the matches counted by the first read.
  const wanted = Math.min(plan.limit < 0 ? Infinity : plan.limit, total - start);

  let batch = first.items;
  let inBatch = 0;
  let moreToRead = batch.length === batchLimit(plan.limit) && plan.limit !== 0;
  let written = 0;
  let chars = 0;
  let cut: PageCut | null = null;
  let done = false;

  const nextChunk = async (): Promise<string> => {
    let chunk = written === 0 ? '{"items":[' : "";
    const head = chunk.length;
    while (written < wanted && chunk.length - head < CHUNK_CHARS) {
      if (sizes.maxChars !== null && written > 0 && chars >= sizes.maxChars) {
        cut = "max_page_chars";
        break;
      }
      if (inBatch === batch.length) {
        if (!moreToRead) break;
        const left = plan.limit < 0 ? -1 : plan.limit - written;
        readSize = Math.max(1, Math.min(MAX_READ, Math.floor(READ_CHARS / (chars / written))));
        const page = await read({ ...base, limit: batchLimit(left), offset: start + written });
        batch = page.items;
        inBatch = 0;
        moreToRead = batch.length === batchLimit(left);
        if (batch.length === 0) break;
      }
      const text = JSON.stringify(batch[inBatch++]);
      chunk += (written === 0 ? "" : ",") + text;
      chars += text.length + 1;
      written++;
    }
    const ended = cut !== null || written >= wanted || (inBatch === batch.length && !moreToRead);
    if (ended) {
      if (cut === null && plan.cap !== null && start + written < total) cut = plan.cap;
      const limit = cut === "max_page_chars" ? written : plan.limit;
      chunk += `],"limit":${JSON.stringify(limit)},"offset":${JSON.stringify(offset)},"total":${JSON.stringify(total)}`;
      chunk += cut === null ? "}" : `,"truncated_by":"${cut}"}`;
      done = true;
    }
    return chunk;
  };

  const firstChunk = await nextChunk();
  if (done) return c.body(firstChunk, 200, { "content-type": "application/json" });
  const encoder = new TextEncoder();
  let pending: string | null = firstChunk;
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      let chunk: string;
      try {
        chunk = pending ?? (await nextChunk());
      } catch (e) {
        log.error(`a list answer failed after ${written} of its ${total} items; its stream ends with an error`, e);
        throw e;
      }
      pending = null;
      controller.enqueue(encoder.encode(chunk));
      if (done) controller.close();
    },
  });
  return c.body(body, 200, { "content-type": "application/json" });
}
