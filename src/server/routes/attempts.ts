/** A rollout's attempts: search, latest, start and update. */
import { Hono } from "hono";
import { readBody } from "../json-body.ts";
import { listAnswer } from "../paging.ts";
import { queryParams } from "../query-params.ts";
import * as S from "../schemas.ts";
import type { RouteDeps } from "./deps.ts";

export function attemptRoutes(deps: RouteDeps): Hono {
  const { store, idempotent } = deps;
  const routes = new Hono();
  routes.post("/rollouts/:rollout_id/attempts/search", async (c) =>
    listAnswer(c, await readBody(c, S.AttemptSearch, true), deps, (q) => store.queryAttempts(c.req.param("rollout_id"), q)),
  );
  routes.get("/rollouts/:rollout_id/attempts/latest", async (c) => c.json(await store.getLatestAttempt(c.req.param("rollout_id"))));
  routes.get("/rollouts/:rollout_id/attempts", async (c) =>
    listAnswer(c, queryParams(c, S.AttemptSearch), deps, (q) => store.queryAttempts(c.req.param("rollout_id"), q)),
  );
  routes.post("/rollouts/:rollout_id/attempts", idempotent, async (c) => {
    const b = await readBody(c, S.WorkerIdBody, true);
    return c.json(await store.startAttempt(c.req.param("rollout_id"), { worker_id: b.worker_id ?? null }), 201);
  });
  routes.post("/rollouts/:rollout_id/attempts/:attempt_id", idempotent, async (c) =>
    c.json(await store.updateAttempt(c.req.param("rollout_id"), c.req.param("attempt_id"), await readBody(c, S.AttemptPatchBody))),
  );
  return routes;
}
