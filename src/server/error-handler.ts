/** The store app's `onError` and `notFound`: every failure answered in the JSON error shape (errors.ts). */
import type { ErrorHandler, NotFoundHandler } from "hono";
import type { LogWriter } from "../platform/log.ts";
import { errorResponse, routeNotFound } from "./errors.ts";

/**
 * A 5xx is logged with its stack, a 4xx at debug level. A request whose client closed the connection
 * mid-request (a body cut short) has no one to answer and broke nothing here: logged at debug level, a
 * 5xx reported as 499.
 */
export function answerError(log: LogWriter): ErrorHandler {
  return (err, c) => {
    const { status, body: payload } = errorResponse(err);
    if ((status >= 500 || payload.error_type === "UnreadableBody") && clientClosed(err, c.req.raw.signal)) {
      log.debug(`${c.req.method} ${c.req.path}: the client closed the connection (${err instanceof Error ? err.message : String(err)})`);
      const answer = status >= 500 ? { status: 499, error_type: "ClientClosedRequest" } : { status, error_type: payload.error_type };
      return c.json({ detail: "The client closed the connection", error_type: answer.error_type }, answer.status as 400);
    }
    if (status >= 500)
      log.error(`${c.req.method} ${c.req.path} failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    else log.debug(`${c.req.method} ${c.req.path} -> ${status} ${payload.error_type}: ${payload.detail}`);
    return c.json(payload, status as 400);
  };
}

/** A 404 `RouteNotFound`. */
export const answerRouteNotFound: NotFoundHandler = (c) => {
  const { status, body: payload } = errorResponse(routeNotFound(c.req.method, c.req.path));
  return c.json(payload, status as 404);
};

/**
 * A request that failed because its client went away: node:http rejects the body read with an
 * ECONNRESET "aborted" (sometimes before the request's signal fires); Bun aborts the signal.
 */
function clientClosed(err: unknown, signal: AbortSignal): boolean {
  if (signal.aborted) return true;
  for (let e = err; e instanceof Error; e = e.cause) if ((e as { code?: unknown }).code === "ECONNRESET") return true;
  return false;
}
