/** `POST /attempts/finish`: the end of an attempt in one request (spans, final update, next claim; see finish.ts). */
import { Hono } from "hono";
import { errorResponse } from "../errors.ts";
import { FinishPartError, finishAttempt } from "../finish.ts";
import { readBody } from "../json-body.ts";
import * as S from "../schemas.ts";
import { minimalSpanEcho, type SpanWithOptionalSequence } from "../spans.ts";
import type { RouteDeps } from "./deps.ts";
import { prefersMinimalReturn } from "./spans.ts";

export function finishRoutes({ store, idempotent, log }: RouteDeps): Hono {
  const routes = new Hono();
  routes.post("/attempts/finish", idempotent, async (c) => {
    const b = await readBody(c, S.FinishAttemptBody);
    try {
      const { spans, attempt, next } = await finishAttempt(store, b);
      const minimal = prefersMinimalReturn(c.req.header("prefer"));
      if (minimal) c.header("preference-applied", "return=minimal");
      return c.json({ spans: minimal ? minimalSpanEcho(b.spans as SpanWithOptionalSequence[], spans) : spans, attempt, next });
    } catch (err) {
      if (!(err instanceof FinishPartError)) throw err;
      // The error answer names the failed part and the parts already stored.
      const { status, body: payload } = errorResponse(err.reason);
      if (status >= 500)
        log.error(
          `POST ${c.req.path} (${err.failed}) failed: ${err.reason instanceof Error ? (err.reason.stack ?? err.reason.message) : String(err.reason)}`,
        );
      return c.json({ ...payload, failed_part: err.failed, completed: err.completed }, status as 400);
    }
  });
  return routes;
}
