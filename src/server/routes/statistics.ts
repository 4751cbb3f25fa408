/** What the server and its store say about themselves: `GET /health` (answered without the token) and `GET /statistics`. */
import { Hono } from "hono";
import type { RouteDeps } from "./deps.ts";

export function statisticsRoutes({ store }: RouteDeps): Hono {
  const routes = new Hono();
  routes.get("/health", (c) => c.json({ status: "ok" }));
  routes.get("/statistics", async (c) => c.json(await store.statistics()));
  return routes;
}
