/** Workers: search, get, and the heartbeat update. */
import { Hono } from "hono";
import { readBody } from "../json-body.ts";
import { pageResponse, pagedQuery } from "../paging.ts";
import { queryParams } from "../query-params.ts";
import * as S from "../schemas.ts";
import type { RouteDeps } from "./deps.ts";

export function workerRoutes({ store, sizes, idempotent }: RouteDeps): Hono {
  const routes = new Hono();
  routes.post("/workers/search", async (c) =>
    pageResponse(c, await store.queryWorkers(pagedQuery(await readBody(c, S.WorkerSearch, true), sizes)), sizes.maxChars),
  );
  routes.get("/workers", async (c) =>
    pageResponse(c, await store.queryWorkers(pagedQuery(queryParams(c, S.WorkerSearch), sizes)), sizes.maxChars),
  );
  routes.get("/workers/:worker_id", async (c) => c.json(await store.getWorkerById(c.req.param("worker_id"))));
  routes.post("/workers/:worker_id", idempotent, async (c) => {
    const b = await readBody(c, S.WorkerUpdateBody, true);
    return c.json(await store.updateWorker(c.req.param("worker_id"), b.heartbeat_stats));
  });
  return routes;
}
