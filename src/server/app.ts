/**
 * `createStoreApp(store, options)`: one Hono app serving a LightningStore over HTTP (Agent Lightning's
 * `/v1/agl` API, with docs/departures.md rows 1, 2, 8, 12) plus the routes added here: `POST /v1/agl/spans/batch` (many spans, one
 * transaction, sequence ids assigned server-side), `POST /v1/agl/attempts/finish` (an attempt's last spans,
 * final update and the next claim in one request), `POST /v1/agl/spans/next/many`, a long-polling
 * `POST /v1/agl/waits/rollouts`, Prometheus text at `GET /metrics` and upstream's `GET /v1/agl/prometheus/`
 * with `POST /v1/agl/metrics/push` for other processes' metrics, and `Idempotency-Key` on the write
 * routes (idempotency.ts, docs/departures.md#23), and the dashboard at `/` with the routes it reads
 * (dashboard/, docs/dashboard.md). Runtime-neutral: each runtime
 * serves `app.fetch` with its own server (runtimes/*.ts).
 *
 * Laid out as Hono apps are: the middleware are named functions in their own modules, applied here in
 * order; each resource's routes are a small Hono app in routes/ (the dashboard's in dashboard/api.ts),
 * mounted under `/v1/agl` with `app.route`, sharing one `RouteDeps` object.
 */
import { Hono } from "hono";
import type { Context, MiddlewareHandler } from "hono";
import type { LightningStore } from "../store/base.ts";
import { silentLogger, type LogWriter } from "../platform/log.ts";
import { bearerAuth } from "./auth.ts";
import { DEFAULT_BODY_LIMIT, requestBodyLimit } from "./body-limit.ts";
import { browserGuard } from "./browser-guard.ts";
import { coalescedStore } from "./coalesce.ts";
import { normaliseOrigins, storeCors } from "./cors.ts";
import { dashboardRoutes } from "./dashboard/api.ts";
import { isDashboardAsset, registerDashboardFiles } from "./dashboard/static.ts";
import { drainRefusedBodies } from "./drain-refused.ts";
import { answerError, answerRouteNotFound } from "./error-handler.ts";
import { IdempotencyCache, idempotentWrites, type IdempotencyBackend, type IdempotencyOptions } from "./idempotency.ts";
import { type MetricsRegistry, processMetrics } from "../metrics/registry.ts";
import { type MetricsPeers, ServerMetrics, instrumentStore } from "./metrics.ts";
import { otlpRoutes } from "./otlp/route.ts";
import { pageSizes } from "./paging.ts";
import { requestMetrics } from "./request-metrics.ts";
import { attemptRoutes } from "./routes/attempts.ts";
import type { RouteDeps } from "./routes/deps.ts";
import { finishRoutes } from "./routes/finish.ts";
import { metricsRoutes } from "./routes/metrics.ts";
import { resourceRoutes } from "./routes/resources.ts";
import { rolloutRoutes } from "./routes/rollouts.ts";
import { spanRoutes } from "./routes/spans.ts";
import { statisticsRoutes } from "./routes/statistics.ts";
import { workerRoutes } from "./routes/workers.ts";
import { MAX_WAIT_SECONDS, waitRoutes } from "./routes/waits.ts";
import type { TestHooks } from "./test-hooks.ts";

export { DEFAULT_BODY_LIMIT } from "./body-limit.ts";
export { normaliseOrigins } from "./cors.ts";
export { MAX_WAIT_SECONDS, WAIT_SETTLED_HEADER } from "./routes/waits.ts";

export const API_PREFIX = "/v1/agl";
/** Response header naming the worker process that answered (`agl store --workers N`). */
export const WORKER_HEADER = "agl-worker";

export interface StoreAppOptions {
  /** When set, every route but `GET /v1/agl/health` and the dashboard's files needs `Authorization: Bearer <token>`. */
  token?: string | null;
  /** Allowed CORS origins; `*` allows any. None: no CORS headers. Without a token, the only origins besides the server's own whose pages may write. */
  corsOrigins?: readonly string[];
  /** The address the server listens on, for the `Host` check of a server without a token (browser-guard.ts). Default 127.0.0.1. */
  bindAddress?: string;
  /** `Host` names answered besides localhost, IP addresses and the bind address (`--allowed-host`; browser-guard.ts). */
  allowedHosts?: readonly string[];
  /** Largest request body in bytes (413 beyond). Default 32 MiB. */
  bodyLimitBytes?: number;
  /** Aborted when the server shuts down: held long polls answer at once. */
  shutdownSignal?: AbortSignal;
  /** Cap of one long poll in seconds. Default 30. */
  maxWaitSeconds?: number;
  /** Export the Prometheus text (`GET /metrics`, `GET /v1/agl/prometheus/`), count requests and store calls, take pushed metrics. Default true. */
  metrics?: boolean;
  /**
   * The registry served after the server's own metrics, which `POST /v1/agl/metrics/push` adds to.
   * Default: this process's (`processMetrics`), the one `PrometheusMetricsBackend` writes to.
   */
  metricsRegistry?: MetricsRegistry;
  /** The other processes serving the same store, whose metrics each scrape adds up (`agl store --workers N`). */
  metricsPeers?: MetricsPeers;
  log?: LogWriter;
  /**
   * Answers remembered for requests with an `Idempotency-Key` header, so a retried write runs once
   * (see idempotency.ts); `false` ignores the header. Default: 600 s, 10,000 keys, 64 MiB.
   */
  idempotency?: IdempotencyOptions | false;
  /**
   * Opt-in page caps of the list routes (docs/http-api.md#list-answers); without them, as upstream, a
   * request without `limit` or with `limit=-1` gets every match. A page a cap cuts short says so
   * (`truncated_by`). `defaultPageSize`: items of an answer to a request without `limit`.
   */
  defaultPageSize?: number | null;
  /** Most items of one list answer (`-1` and larger limits get this many); also most rollouts one dequeue claims (default for that: 10,000). */
  maxPageSize?: number | null;
  /** Characters of JSON after which a list answer ends early, after at least one item (its `limit` is then the items it holds). */
  maxPageChars?: number | null;
  /** Where those answers are kept instead of a cache of this app's own (the workers of `agl store --workers N` share the primary's). */
  idempotencyBackend?: IdempotencyBackend;
  /** Serve the dashboard's page at `/` (docs/dashboard.md); the API routes it reads stay either way. Default true. */
  dashboard?: boolean;
  /** Sent as the `agl-worker` header of every answer: which worker process of `agl store --workers N` answered. */
  workerName?: string;
  /** Test-only hooks (a settable clock, a store reset); never enabled by default. */
  testHooks?: TestHooks;
}

/** The route modules under `/v1/agl`, mounted in this order (a path two of them match goes to the first). */
const API_ROUTES: readonly ((deps: RouteDeps) => Hono)[] = [
  statisticsRoutes,
  rolloutRoutes,
  attemptRoutes,
  workerRoutes,
  resourceRoutes,
  spanRoutes,
  finishRoutes,
  waitRoutes,
  dashboardRoutes,
];

export function createStoreApp(rawStore: LightningStore, options: StoreAppOptions = {}): Hono {
  const log = options.log ?? silentLogger;
  const metrics =
    (options.metrics ?? true) ? new ServerMetrics(rawStore, options.metricsRegistry ?? processMetrics, log, options.metricsPeers) : null;
  if (metrics) options.shutdownSignal?.addEventListener("abort", () => metrics.close(), { once: true });
  const limit = options.bodyLimitBytes ?? DEFAULT_BODY_LIMIT;
  const token = options.token ?? null;
  const dashboard = options.dashboard ?? true;
  const origins = normaliseOrigins(options.corsOrigins);
  const deps = routeDeps(rawStore, metrics, log, options);

  const app = new Hono();
  app.onError(answerError(log));
  app.notFound(answerRouteNotFound);
  // Outermost: a refusal's answer waits for the body the route never read (drain-refused.ts).
  app.use("*", drainRefusedBodies(limit, log));
  if (options.workerName !== undefined) app.use("*", answeredBy(options.workerName));
  if (metrics) app.use("*", requestMetrics(metrics));
  const guard = browserGuard({
    token,
    bindAddress: options.bindAddress,
    allowedHosts: options.allowedHosts,
    corsOrigins: origins,
    corsOption: true,
  });
  if (guard) app.use("*", guard);
  if (origins.length > 0) app.use("*", storeCors(origins));
  if (token !== null) app.use("*", bearerAuth({ token, isPublic: servedWithoutToken(dashboard) }));
  app.use("*", requestBodyLimit(limit));
  options.testHooks?.install(app, API_PREFIX);

  for (const routes of API_ROUTES) app.route(API_PREFIX, routes(deps));
  if (dashboard) registerDashboardFiles(app);
  app.route("/", otlpRoutes(deps.store, { maxBytes: limit, log }));
  app.route("/", metricsRoutes(deps));
  return app;
}

/** What the routes share: the store timed by the metrics and coalesced in front of that (queueing is not store time). */
function routeDeps(rawStore: LightningStore, metrics: ServerMetrics | null, log: LogWriter, options: StoreAppOptions): RouteDeps {
  const idempotent: MiddlewareHandler =
    options.idempotency === false
      ? (_c, next) => next()
      : idempotentWrites(options.idempotencyBackend ?? new IdempotencyCache(options.idempotency), log);
  return {
    store: coalescedStore(metrics ? instrumentStore(rawStore, metrics) : rawStore),
    metrics,
    sizes: pageSizes(options.defaultPageSize, options.maxPageSize, options.maxPageChars),
    idempotent,
    log,
    maxWaitSeconds: options.maxWaitSeconds ?? MAX_WAIT_SECONDS,
    shutdownSignal: options.shutdownSignal,
  };
}

/**
 * The `agl-worker` header on the answers, so a client (or a log) can tell which worker answered. Set
 * before the route runs: the answers it builds carry it, where setting it on a finished answer would
 * make Hono copy that answer (a new Response around its body, which costs more to send than the route).
 */
function answeredBy(name: string): MiddlewareHandler {
  return (c, next) => {
    c.header(WORKER_HEADER, name);
    return next();
  };
}

/**
 * Requests a server with a token answers without it: CORS preflights, the health check, and the
 * dashboard's files (they hold no data and no token: the page loads, then asks for the token).
 */
function servedWithoutToken(dashboard: boolean): (c: Context) => boolean {
  return (c) =>
    c.req.method === "OPTIONS" || c.req.path === `${API_PREFIX}/health` || (dashboard && isDashboardAsset(c.req.method, c.req.path));
}
