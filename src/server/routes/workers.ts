/** Workers: search, get, and the heartbeat update. */
import { Hono } from "hono";
import { readBody } from "../json-body.ts";
import { listAnswer } from "../paging.ts";
import { queryParams } from "../query-params.ts";
import * as S from "../schemas.ts";
import type { RouteDeps } from "./deps.ts";

export function workerRoutes(deps: RouteDeps): Hono {
  const { store, idempotent } = deps;
  const routes = new Hono();
  routes.post("/workers/search", async (c) => listAnswer(c, await readBody(c, S.WorkerSearch, true), deps, (q) => store.queryWorkers(q)));
  routes.get("/workers", async (c) => listAnswer(c, queryParams(c, S.WorkerSearch), deps, (q) => store.queryWorkers(q)));
  routes.get("/workers/:worker_id", async (c) => c.json(await store.getWorkerById(c.req.param("worker_id"))));
  routes.post("/workers/:worker_id", idempotent, async (c) => {
    const b = await readBody(c, S.WorkerUpdateBody, true);
    return c.json(await store.updateWorker(c.req.param("worker_id"), b.heartbeat_stats));
  });
  return routes;
}
