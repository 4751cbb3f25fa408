/** Resources (the models, prompts and settings the runners read): latest, list, add, get and update. */
import { Hono } from "hono";
import { readJsonBody } from "../json-body.ts";
import { listAnswer } from "../paging.ts";
import { queryParams } from "../query-params.ts";
import * as S from "../schemas.ts";
import type { RouteDeps } from "./deps.ts";

export function resourceRoutes(deps: RouteDeps): Hono {
  const { store, idempotent } = deps;
  const routes = new Hono();
  routes.get("/resources/latest", async (c) => c.json(await store.getLatestResources()));
  routes.get("/resources", async (c) => listAnswer(c, queryParams(c, S.ResourcesSearch), deps, (q) => store.queryResources(q)));
  // The body goes to the store as it is: the store parses resources itself (NamedResources).
  routes.post("/resources", idempotent, async (c) => c.json(await store.addResources((await readJsonBody(c, false)) as never), 201));
  routes.get("/resources/:resources_id", async (c) => c.json(await store.getResourcesById(c.req.param("resources_id"))));
  routes.post("/resources/:resources_id", idempotent, async (c) =>
    c.json(await store.updateResources(c.req.param("resources_id"), (await readJsonBody(c, false)) as never)),
  );
  return routes;
}
