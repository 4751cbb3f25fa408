/** The store app's HTTP metrics: every request counted and timed, and the handler that answers the Prometheus text. */
import type { Context, Handler, MiddlewareHandler } from "hono";
import { routePath } from "hono/route";
import type { ServerMetrics } from "./metrics.ts";
import { PROMETHEUS_CONTENT_TYPE } from "../metrics/registry.ts";

/** A request's route template (`/v1/agl/rollouts/{rollout_id}`), or `unmatched`: one series per route, not per id. */
function routeTemplate(c: Context): string {
  const p = routePath(c, -1);
  return p === "*" || p === "/*" || p === "" ? "unmatched" : p.replace(/:([A-Za-z_]+)/g, "{$1}");
}

/** `agl_http_total` and `agl_http_latency` by route template, method and status. */
export function requestMetrics(metrics: ServerMetrics): MiddlewareHandler {
  return async (c, next) => {
    const t0 = performance.now();
    await next();
    const labels = { path: routeTemplate(c), method: c.req.method, status: String(c.res.status) };
    metrics.httpTotal.inc(labels);
    metrics.httpLatency.observe(labels, (performance.now() - t0) / 1000);
  };
}

/** The Prometheus text: `GET /metrics` and upstream's `GET /v1/agl/prometheus`. */
export function metricsExport(metrics: ServerMetrics): Handler {
  return async (c) => c.body(await metrics.render(), 200, { "content-type": PROMETHEUS_CONTENT_TYPE });
}
