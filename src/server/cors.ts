/** CORS for the store server's `--cors-origin` list (docs/departures.md#30). */
import type { MiddlewareHandler } from "hono";
import { cors } from "hono/cors";
import { HttpProblem } from "./errors.ts";
import { IDEMPOTENT_REPLAYED_HEADER } from "./idempotency.ts";
import { WAIT_SETTLED_HEADER } from "./routes/waits.ts";

/** Normalised like upstream: blanks dropped, any `*` means all. */
export function normaliseOrigins(origins: readonly string[] | undefined): string[] {
  const list = (origins ?? []).map((o) => o.trim()).filter((o) => o.length > 0);
  return list.includes("*") ? ["*"] : list;
}

/**
 * `*` answers `*` and never allows credentials: echoing any origin (or `null`) with credentials would let
 * every web page act with a visitor's cookies. A list echoes listed origins only. A bearer token set by
 * the page's code is not a credential here. `origins` are normalised and not empty.
 */
export function storeCors(origins: readonly string[]): MiddlewareHandler {
  const anyOrigin = origins[0] === "*";
  const headers = cors({
    origin: anyOrigin ? "*" : [...origins],
    allowMethods: ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
    allowHeaders: [],
    credentials: !anyOrigin,
    exposeHeaders: [WAIT_SETTLED_HEADER, "preference-applied", IDEMPOTENT_REPLAYED_HEADER, "www-authenticate"],
  });
  // Hono answers an OPTIONS request itself with 204; upstream's server (Starlette's CORS middleware)
  // answers a preflight 200 "OK", and 400 when the origin is not allowed.
  return async (c, next) => {
    const preflight = await headers(c, next);
    if (!(preflight instanceof Response)) return;
    const origin = c.req.header("origin");
    if (origin !== undefined && !preflight.headers.has("access-control-allow-origin"))
      throw new HttpProblem(400, "CorsOriginNotAllowed", `Disallowed CORS origin: ${origin} is not among --cors-origin`);
    const answer = new Headers(preflight.headers);
    answer.set("content-type", "text/plain; charset=utf-8");
    return new Response("OK", { status: 200, headers: answer });
  };
}
