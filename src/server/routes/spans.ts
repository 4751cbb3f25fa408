/** Spans: search, sequence ids, one span, and a batch in one transaction with the ids assigned here. */
import { Hono } from "hono";
import type { Span } from "../../types/index.ts";
import { ValidationError } from "../../types/index.ts";
import { checkSpanObjects } from "../finish.ts";
import { readBody, readJsonBody } from "../json-body.ts";
import { listAnswer } from "../paging.ts";
import { queryParams } from "../query-params.ts";
import * as S from "../schemas.ts";
import { addSpansAssigningSequence, minimalSpanEcho } from "../spans.ts";
import type { RouteDeps } from "./deps.ts";

/** RFC 7240 `Prefer: return=minimal`: the batch and finish routes then answer `minimalSpanEcho`. */
export const prefersMinimalReturn = (prefer: string | undefined): boolean =>
  prefer !== undefined && /(?:^|,)\s*return\s*=\s*"?minimal"?\s*(?:[;,]|$)/i.test(prefer);

export function spanRoutes(deps: RouteDeps): Hono {
  const { store, idempotent } = deps;
  const routes = new Hono();
  routes.post("/spans/search", async (c) => {
    const { rollout_id, ...q } = await readBody(c, S.SpanSearch);
    return listAnswer(c, q, deps, (page) => store.querySpans(rollout_id, page));
  });
  routes.get("/spans", async (c) => {
    const { rollout_id, ...q } = queryParams(c, S.SpanSearch);
    return listAnswer(c, q, deps, (page) => store.querySpans(rollout_id, page));
  });
  routes.post("/spans/next/many", idempotent, async (c) => {
    const { pairs } = await readBody(c, S.ManySequenceBody);
    return c.json({ sequence_ids: await store.getManySpanSequenceIds(pairs) });
  });
  routes.post("/spans/next", idempotent, async (c) => {
    const b = await readBody(c, S.NextSequenceBody);
    return c.json({ sequence_id: await store.getNextSpanSequenceId(b.rollout_id, b.attempt_id) });
  });
  routes.post("/spans/batch", idempotent, async (c) => {
    const { spans } = await readBody(c, S.SpanBatchBody);
    const sent = checkSpanObjects(spans);
    const stored = await addSpansAssigningSequence(store, sent);
    if (!prefersMinimalReturn(c.req.header("prefer"))) return c.json(stored, 201);
    c.header("preference-applied", "return=minimal");
    return c.json(minimalSpanEcho(sent, stored), 201);
  });
  routes.post("/spans", idempotent, async (c) => {
    const span = await readJsonBody(c, false);
    if (span === null || typeof span !== "object" || Array.isArray(span))
      throw new ValidationError("The request body must be a span object", []);
    return c.json(await store.addSpan(span as Span), 201);
  });
  return routes;
}
