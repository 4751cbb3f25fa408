/**
 * The Prometheus exposition at `GET /metrics` and at upstream's paths: its store server's
 * `/v1/agl/prometheus/` and its `agl prometheus` exporter's `/v1/prometheus/` (with or without the
 * trailing slash its scrape configs use); and `POST /v1/agl/metrics/push`, where other processes' clients
 * send what their registries changed (docs/metrics.md). Mounted at the root, only when the app keeps metrics.
 */
import { Hono } from "hono";
import { MetricsPush } from "../../metrics/push-schema.ts";
import { readBody } from "../json-body.ts";
import { metricsExport } from "../request-metrics.ts";
import type { RouteDeps } from "./deps.ts";

const EXPOSITION_PATHS = ["/metrics", "/v1/agl/prometheus", "/v1/agl/prometheus/", "/v1/prometheus", "/v1/prometheus/"];

/** Most series the pushes of all processes may make in this server's registry. */
export const MAX_PUSHED_SERIES = 10_000;

export function metricsRoutes({ metrics, idempotent }: RouteDeps): Hono {
  const routes = new Hono();
  if (metrics === null) return routes;
  for (const path of EXPOSITION_PATHS) routes.get(path, metricsExport(metrics));
  routes.post("/v1/agl/metrics/push", idempotent, async (c) => {
    const push = await readBody(c, MetricsPush);
    // This process's own registry is served as it is: its values are there already.
    const applied = push.source !== metrics.shared.source;
    if (applied) metrics.shared.applyPush(push, MAX_PUSHED_SERIES);
    return c.json({ applied });
  });
  return routes;
}
