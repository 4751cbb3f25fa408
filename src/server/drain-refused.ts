/**
 * A refusal (401, 403, 415, a bad header) is answered before the route reads the request's body. On Node
 * and Deno, @hono/node-server then resets a connection whose unread body takes over 500 ms to drain, and
 * most clients read the answer only after sending the whole body: they would see a broken pipe instead
 * of the clear 4xx. This middleware, outermost, reads and drops such a body before the answer goes out,
 * up to the body limit (a larger declared body is refused at once: draining it is what the limit avoids);
 * the server's request timeout bounds a body that trickles in.
 */
import type { MiddlewareHandler } from "hono";
import type { LogWriter } from "../platform/log.ts";

/** Whether the request declares a body no larger than `limit` bytes (chunked ones count, they are cut at the limit). */
function drainableBody(headers: Headers, limit: number): boolean {
  if (headers.get("transfer-encoding") !== null) return true;
  const length = Number(headers.get("content-length") ?? 0);
  return length > 0 && length <= limit;
}

export function drainRefusedBodies(limit: number, log: Pick<LogWriter, "debug">): MiddlewareHandler {
  return async (c, next) => {
    await next();
    if (c.res.status < 400 || c.req.method === "GET" || c.req.method === "HEAD") return;
    if (!drainableBody(c.req.raw.headers, limit) || c.req.raw.bodyUsed || c.req.raw.body === null) return;
    let read = 0;
    try {
      const reader = c.req.raw.body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        read += value.byteLength;
        if (read > limit) {
          await reader.cancel();
          break;
        }
      }
    } catch (e) {
      // The client went away mid-upload: no one is left to answer, and nothing was stored.
      log.debug(
        `${c.req.method} ${c.req.path}: the refused request's body could not be read (${e instanceof Error ? e.message : String(e)})`,
      );
    }
  };
}
