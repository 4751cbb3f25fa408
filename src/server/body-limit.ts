/**
 * The largest request body (413 `PayloadTooLarge` beyond it). Hono's `bodyLimit` reads
 * `c.req.raw.body`, which makes @hono/node-server build a full Request for every call; so a declared
 * Content-Length is checked from the header alone, and only bodies without one (chunked) go through
 * Hono's streaming check.
 */
import type { MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { HttpProblem } from "./errors.ts";
import { unreadableBody } from "./json-body.ts";

export const DEFAULT_BODY_LIMIT = 32 * 1024 * 1024;

export function requestBodyLimit(limit: number): MiddlewareHandler {
  const tooLarge = (): never => {
    throw new HttpProblem(413, "PayloadTooLarge", `Request body exceeds the limit of ${limit} bytes`);
  };
  const streamingLimit = bodyLimit({ maxSize: limit, onError: tooLarge });
  return async (c, next) => {
    if (c.req.method === "GET" || c.req.method === "HEAD" || c.req.method === "OPTIONS") return next();
    const length = c.req.header("content-length");
    if (length !== undefined && c.req.header("transfer-encoding") === undefined) {
      return Number(length) > limit ? tooLarge() : next();
    }
    // Only the body read can throw here: errors of the routes behind it are answered by onError already.
    try {
      return await streamingLimit(c, next);
    } catch (e) {
      throw unreadableBody(e);
    }
  };
}
