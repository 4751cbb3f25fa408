/**
 * `createStoreApp(store, options)`: one Hono app serving a LightningStore over HTTP (Agent Lightning's
 * `/v1/agl` API, with docs/departures.md rows 1, 2, 8, 12) plus the routes added here: `POST /v1/agl/spans/batch` (many spans, one
 * transaction, sequence ids assigned server-side), `POST /v1/agl/attempts/finish` (an attempt's last spans,
 * final update and the next claim in one request), `POST /v1/agl/spans/next/many`, a long-polling
 * `POST /v1/agl/waits/rollouts`, Prometheus text at `GET /metrics`, and `Idempotency-Key` on the write
 * routes (idempotency.ts, docs/departures.md#23), and the dashboard at `/` with the routes it reads
 * (dashboard/, docs/dashboard.md). Runtime-neutral: each runtime
 * serves `app.fetch` with its own server (runtimes/*.ts).
 */
import { Hono } from "hono";
import type { Context, MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { HTTPException } from "hono/http-exception";
import { cors } from "hono/cors";
import { routePath } from "hono/route";
import type { z } from "zod";
import type { LightningStore } from "../store/base.ts";
import { LightningError, ValidationError, parseOrThrow, type PaginatedResult, type Rollout, type Span } from "../types/index.ts";
import { bearerChallenge, bearerToken, tokensEqual } from "./auth.ts";
import { browserGuard } from "./browser-guard.ts";
import { HttpProblem, errorResponse, routeNotFound } from "./errors.ts";
import { checkJsonContentType, parseJsonBody } from "./json-body.ts";
import { drainRefusedBodies } from "./drain-refused.ts";
import { pageLimit, pageResponse, pageSizes } from "./paging.ts";
import { silentLogger, type LogWriter } from "../platform/log.ts";
import { ServerMetrics, instrumentStore } from "./metrics.ts";
import { otlpTracesHandler } from "./otlp/route.ts";
import * as S from "./schemas.ts";
import { queryParams } from "./query-params.ts";
import { coalescedStore } from "./coalesce.ts";
import { addSpansAssigningSequence, minimalSpanEcho, type SpanWithOptionalSequence } from "./spans.ts";
import { FinishPartError, checkSpanObjects, finishAttempt } from "./finish.ts";
import { IDEMPOTENT_REPLAYED_HEADER, IdempotencyCache, idempotentWrites, type IdempotencyOptions } from "./idempotency.ts";
import type { TestHooks } from "./test-hooks.ts";
import { registerDashboardApi } from "./dashboard/api.ts";
import { isDashboardAsset, registerDashboardFiles } from "./dashboard/static.ts";

export const API_PREFIX = "/v1/agl";
/** Longest a `POST /waits/rollouts` request is held (docs/departures.md#8). */
export const MAX_WAIT_SECONDS = 30;
/** Response header of the wait route: `true` when no asked-for rollout can still finish within this request's answer. */
export const WAIT_SETTLED_HEADER = "agl-wait-settled";

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
  /** Export `GET /metrics` and count requests and store calls. Default true. */
  metrics?: boolean;
  log?: LogWriter;
  /**
   * Answers remembered for requests with an `Idempotency-Key` header, so a retried write runs once
   * (see idempotency.ts); `false` ignores the header. Default: 600 s, 10,000 keys, 64 MiB.
   */
  idempotency?: IdempotencyOptions | false;
  /** Items of a list answer without `limit` (docs/departures.md#22). Default 1,000. */
  defaultPageSize?: number;
  /** Most items of one list answer, and most rollouts one dequeue claims; larger limits and `-1` get this many. Default 10,000. */
  maxPageSize?: number;
  /** Characters of JSON after which a list answer ends its page early (its `limit` says where). Default 64 Mi (2^26). */
  maxPageChars?: number;
  /** Serve the dashboard's page at `/` (docs/dashboard.md); the API routes it reads stay either way. Default true. */
  dashboard?: boolean;
  /** Test-only hooks (a settable clock, a store reset); never enabled by default. */
  testHooks?: TestHooks;
}

export const DEFAULT_BODY_LIMIT = 32 * 1024 * 1024;

/** Normalised like upstream: blanks dropped, any `*` means all. */
export function normaliseOrigins(origins: readonly string[] | undefined): string[] {
  const list = (origins ?? []).map((o) => o.trim()).filter((o) => o.length > 0);
  return list.includes("*") ? ["*"] : list;
}

async function readJson(c: Context, optional: boolean): Promise<unknown> {
  let text: string;
  try {
    text = await c.req.text();
  } catch (e) {
    throw unreadableBody(e);
  }
  if (text.trim() === "") {
    if (optional) return undefined;
    throw new ValidationError("A JSON request body is required", []);
  }
  checkJsonContentType(c.req.header("content-type"));
  return parseJsonBody(text);
}

/**
 * A failed read of a request body: the body limit's own 413 as it is; anything else is a body that never
 * fully arrived (the client closed the connection mid-upload, a broken chunked encoding), which is the
 * client's failure (400), not a server error.
 */
function unreadableBody(e: unknown): unknown {
  if (e instanceof LightningError || e instanceof HTTPException) return e;
  return new HttpProblem(400, "UnreadableBody", `The request body could not be read: ${e instanceof Error ? e.message : String(e)}`, {
    cause: e,
  });
}

/** The JSON body parsed with a (strict) schema; a missing body counts as `{}` when `optional`. */
async function body<T extends z.ZodType>(c: Context, schema: T, optional = false): Promise<z.infer<T>> {
  const raw = await readJson(c, optional);
  return parseOrThrow(schema, raw === undefined || raw === null ? (optional ? {} : raw) : raw, "request body");
}

/** Drops keys whose value is undefined (a query object must not carry them to the store). */
const defined = <T extends object>(o: T): T => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;

/** RFC 7240 `Prefer: return=minimal` (the batch span route then answers `minimalSpanEcho`). */
const prefersMinimalReturn = (prefer: string | undefined): boolean =>
  prefer !== undefined && /(?:^|,)\s*return\s*=\s*"?minimal"?\s*(?:[;,]|$)/i.test(prefer);

const templateOf = (c: Context): string => {
  const p = routePath(c, -1);
  return p === "*" || p === "/*" || p === "" ? "unmatched" : p.replace(/:([A-Za-z_]+)/g, "{$1}");
};

export function createStoreApp(rawStore: LightningStore, options: StoreAppOptions = {}): Hono {
  const log = options.log ?? silentLogger;
  const metricsOn = options.metrics ?? true;
  const metrics = metricsOn ? new ServerMetrics(rawStore) : null;
  // Calls are timed at the store itself; coalescing happens in front of that (queueing is not store time).
  const store = coalescedStore(metrics ? instrumentStore(rawStore, metrics) : rawStore);
  const maxWait = options.maxWaitSeconds ?? MAX_WAIT_SECONDS;
  const limit = options.bodyLimitBytes ?? DEFAULT_BODY_LIMIT;
  const token = options.token ?? null;
  const dashboardOn = options.dashboard ?? true;
  // Every write route takes it; reads (searches, waits, GETs) have nothing to repeat.
  const idem: MiddlewareHandler =
    options.idempotency === false ? (_c, next) => next() : idempotentWrites(new IdempotencyCache(options.idempotency), log);
  const sizes = pageSizes(options.defaultPageSize, options.maxPageSize, options.maxPageChars);
  /** A list query with its limit turned into the page size used (see paging.ts). */
  const paged = <Q extends { limit?: number }>(q: Q): Q => ({ ...defined(q), limit: pageLimit(q.limit, sizes) });
  const answerPage = (c: Context, page: PaginatedResult<unknown>): Response => pageResponse(c, page, sizes.maxChars);

  const app = new Hono();

  app.onError((err, c) => {
    const { status, body: payload } = errorResponse(err);
    if ((status >= 500 || payload.error_type === "UnreadableBody") && clientClosed(err, c.req.raw.signal)) {
      // The client closed the connection mid-request (a body cut short): no one to answer, nothing broken here.
      log.debug(`${c.req.method} ${c.req.path}: the client closed the connection (${err instanceof Error ? err.message : String(err)})`);
      const answer = status >= 500 ? { status: 499, error_type: "ClientClosedRequest" } : { status, error_type: payload.error_type };
      return c.json({ detail: "The client closed the connection", error_type: answer.error_type }, answer.status as 400);
    }
    if (status >= 500)
      log.error(`${c.req.method} ${c.req.path} failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    else log.debug(`${c.req.method} ${c.req.path} -> ${status} ${payload.error_type}: ${payload.detail}`);
    return c.json(payload, status as 400);
  });
  app.notFound((c) => {
    const { status, body: payload } = errorResponse(routeNotFound(c.req.method, c.req.path));
    return c.json(payload, status as 404);
  });

  // Outermost: a refusal's answer waits for the body the route never read (drain-refused.ts).
  app.use("*", drainRefusedBodies(limit, log));

  if (metrics) {
    app.use("*", async (c, next) => {
      const t0 = performance.now();
      await next();
      const labels = { path: templateOf(c), method: c.req.method, status: String(c.res.status) };
      metrics.httpTotal.inc(labels);
      metrics.httpLatency.observe(labels, (performance.now() - t0) / 1000);
    });
  }

  const origins = normaliseOrigins(options.corsOrigins);
  const guard = browserGuard({
    token,
    bindAddress: options.bindAddress,
    allowedHosts: options.allowedHosts,
    corsOrigins: origins,
    corsOption: true,
  });
  if (guard) app.use("*", guard);
  if (origins.length > 0) {
    const anyOrigin = origins[0] === "*";
    app.use(
      "*",
      cors({
        // `*` answers `*` and never allows credentials: echoing any origin (or `null`) with credentials
        // would let every web page act with a visitor's cookies. A list echoes listed origins only
        // (docs/departures.md#30). A bearer token set by the page's code is not a credential here.
        origin: anyOrigin ? "*" : origins,
        allowMethods: ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
        allowHeaders: [],
        credentials: !anyOrigin,
        exposeHeaders: [WAIT_SETTLED_HEADER, "preference-applied", IDEMPOTENT_REPLAYED_HEADER, "www-authenticate"],
      }),
    );
  }

  if (token !== null) {
    // An empty token would lock every route (or, read as "no token", open them all): refuse it.
    if (token.trim() === "")
      throw new ValidationError("token must not be empty; leave it out (null) to serve without authentication", ["token"]);
    const auth: MiddlewareHandler = async (c, next) => {
      if (c.req.method === "OPTIONS" || c.req.path === `${API_PREFIX}/health`) return next();
      // The dashboard's files hold no data and no token: the page loads, then asks for the token.
      if (dashboardOn && isDashboardAsset(c.req.method, c.req.path)) return next();
      const given = bearerToken(c.req.header("authorization"));
      if (given === null || !(await tokensEqual(given, token))) {
        const { body: payload } = errorResponse(
          new HttpProblem(
            401,
            "Unauthorized",
            given === null ? "Missing bearer token (Authorization: Bearer <token>)" : "Invalid bearer token",
          ),
        );
        return c.json(payload, 401, { "www-authenticate": bearerChallenge(given !== null) });
      }
      return next();
    };
    app.use("*", auth);
  }

  const tooLarge = (): never => {
    throw new HttpProblem(413, "PayloadTooLarge", `Request body exceeds the limit of ${limit} bytes`);
  };
  // Hono's bodyLimit reads `c.req.raw.body`, which makes @hono/node-server build a full Request for
  // every call; a declared Content-Length is checked from the header alone, and only bodies without
  // one (chunked) go through the streaming check.
  const streamingLimit = bodyLimit({ maxSize: limit, onError: tooLarge });
  app.use("*", async (c, next) => {
    if (c.req.method === "GET" || c.req.method === "HEAD" || c.req.method === "OPTIONS") return next();
    const length = c.req.header("content-length");
    if (length !== undefined && c.req.header("transfer-encoding") === undefined) {
      return Number(length) > limit ? tooLarge() : next();
    }
    // Only the body read can throw here: errors of the routes behind it are answered by onError already.
    try {
      return await streamingLimit(c, next);
    } catch (e) {
      throw unreadableBody(e);
    }
  });

  if (options.testHooks) options.testHooks.install(app, API_PREFIX);

  const api = new Hono();

  api.get("/health", (c) => c.json({ status: "ok" }));

  // Rollouts and the queue
  api.post("/queues/rollouts/enqueue", idem, async (c) => {
    const { rollouts } = await body(c, S.EnqueueBody);
    if (rollouts.length === 0) return c.json([], 201);
    if (rollouts.length === 1) {
      const { input, ...opts } = rollouts[0]!;
      return c.json([await store.enqueueRollout(input, opts)], 201);
    }
    return c.json(await store.enqueueManyRollouts(rollouts), 201);
  });
  api.post("/queues/rollouts/dequeue", idem, async (c) => {
    const b = await body(c, S.DequeueBody, true);
    if (b.limit <= 0) return c.json([]);
    if (b.limit === 1) {
      const one = await store.dequeueRollout({ worker_id: b.worker_id ?? null });
      return c.json(one ? [one] : []);
    }
    return c.json(await store.dequeueManyRollouts({ limit: Math.min(b.limit, sizes.maxSize), worker_id: b.worker_id ?? null }));
  });
  api.post("/rollouts/search", async (c) => answerPage(c, await store.queryRollouts(paged(await body(c, S.RolloutSearch, true)))));
  api.get("/rollouts", async (c) => answerPage(c, await store.queryRollouts(paged(queryParams(c, S.RolloutSearch)))));
  api.post("/rollouts", idem, async (c) => {
    const { input, ...opts } = await body(c, S.StartRolloutBody);
    return c.json(await store.startRollout(input, opts), 201);
  });
  // Single-item lookups answer `200 null` for an unknown id, as upstream's Python client expects (docs/departures.md#2).
  api.get("/rollouts/:rollout_id", async (c) => c.json(await store.getRolloutById(c.req.param("rollout_id"))));
  api.post("/rollouts/:rollout_id", idem, async (c) =>
    c.json(await store.updateRollout(c.req.param("rollout_id"), await body(c, S.RolloutPatchBody))),
  );

  // Attempts
  api.post("/rollouts/:rollout_id/attempts/search", async (c) =>
    answerPage(c, await store.queryAttempts(c.req.param("rollout_id"), paged(await body(c, S.AttemptSearch, true)))),
  );
  api.get("/rollouts/:rollout_id/attempts/latest", async (c) => c.json(await store.getLatestAttempt(c.req.param("rollout_id"))));
  api.get("/rollouts/:rollout_id/attempts", async (c) =>
    answerPage(c, await store.queryAttempts(c.req.param("rollout_id"), paged(queryParams(c, S.AttemptSearch)))),
  );
  api.post("/rollouts/:rollout_id/attempts", idem, async (c) => {
    const b = await body(c, S.WorkerIdBody, true);
    return c.json(await store.startAttempt(c.req.param("rollout_id"), { worker_id: b.worker_id ?? null }), 201);
  });
  api.post("/rollouts/:rollout_id/attempts/:attempt_id", idem, async (c) =>
    c.json(await store.updateAttempt(c.req.param("rollout_id"), c.req.param("attempt_id"), await body(c, S.AttemptPatchBody))),
  );

  // Workers
  api.post("/workers/search", async (c) => answerPage(c, await store.queryWorkers(paged(await body(c, S.WorkerSearch, true)))));
  api.get("/workers", async (c) => answerPage(c, await store.queryWorkers(paged(queryParams(c, S.WorkerSearch)))));
  api.get("/workers/:worker_id", async (c) => c.json(await store.getWorkerById(c.req.param("worker_id"))));
  api.post("/workers/:worker_id", idem, async (c) => {
    const b = await body(c, S.WorkerUpdateBody, true);
    return c.json(await store.updateWorker(c.req.param("worker_id"), b.heartbeat_stats));
  });

  api.get("/statistics", async (c) => c.json(await store.statistics()));

  // Resources
  api.get("/resources/latest", async (c) => c.json(await store.getLatestResources()));
  api.get("/resources", async (c) => answerPage(c, await store.queryResources(paged(queryParams(c, S.ResourcesSearch)))));
  api.post("/resources", idem, async (c) => c.json(await store.addResources((await readJson(c, false)) as never), 201));
  api.get("/resources/:resources_id", async (c) => c.json(await store.getResourcesById(c.req.param("resources_id"))));
  api.post("/resources/:resources_id", idem, async (c) =>
    c.json(await store.updateResources(c.req.param("resources_id"), (await readJson(c, false)) as never)),
  );

  // Spans
  api.post("/spans/search", async (c) => {
    const { rollout_id, ...q } = await body(c, S.SpanSearch);
    return answerPage(c, await store.querySpans(rollout_id, paged(q)));
  });
  api.get("/spans", async (c) => {
    const { rollout_id, ...q } = queryParams(c, S.SpanSearch);
    return answerPage(c, await store.querySpans(rollout_id, paged(q)));
  });
  api.post("/spans/next/many", idem, async (c) => {
    const { pairs } = await body(c, S.ManySequenceBody);
    return c.json({ sequence_ids: await store.getManySpanSequenceIds(pairs) });
  });
  api.post("/spans/next", idem, async (c) => {
    const b = await body(c, S.NextSequenceBody);
    return c.json({ sequence_id: await store.getNextSpanSequenceId(b.rollout_id, b.attempt_id) });
  });
  api.post("/spans/batch", idem, async (c) => {
    const { spans } = await body(c, S.SpanBatchBody);
    const sent = checkSpanObjects(spans);
    const stored = await addSpansAssigningSequence(store, sent);
    if (!prefersMinimalReturn(c.req.header("prefer"))) return c.json(stored, 201);
    c.header("preference-applied", "return=minimal");
    return c.json(minimalSpanEcho(sent, stored), 201);
  });
  api.post("/spans", idem, async (c) => {
    const span = await readJson(c, false);
    if (span === null || typeof span !== "object" || Array.isArray(span))
      throw new ValidationError("The request body must be a span object", []);
    return c.json(await store.addSpan(span as Span), 201);
  });

  // The end of an attempt in one request (spans, final update, next claim): see finish.ts.
  api.post("/attempts/finish", idem, async (c) => {
    const b = await body(c, S.FinishAttemptBody);
    try {
      const { spans, attempt, next } = await finishAttempt(store, b);
      const minimal = prefersMinimalReturn(c.req.header("prefer"));
      if (minimal) c.header("preference-applied", "return=minimal");
      return c.json({ spans: minimal ? minimalSpanEcho(b.spans as SpanWithOptionalSequence[], spans) : spans, attempt, next });
    } catch (err) {
      if (!(err instanceof FinishPartError)) throw err;
      const { status, body: payload } = errorResponse(err.reason);
      if (status >= 500)
        log.error(
          `POST ${c.req.path} (${err.failed}) failed: ${err.reason instanceof Error ? (err.reason.stack ?? err.reason.message) : String(err.reason)}`,
        );
      return c.json({ ...payload, failed_part: err.failed, completed: err.completed }, status as 400);
    }
  });

  // Waits: a long poll held until the rollouts finish, the caller's timeout, or maxWait.
  api.post("/waits/rollouts", async (c) => {
    const b = await body(c, S.WaitBody);
    const asked = b.timeout ?? null;
    const chunk = asked === null ? maxWait : Math.min(Math.max(asked, 0), maxWait);
    const signals = [c.req.raw.signal, options.shutdownSignal].filter((s): s is AbortSignal => s !== undefined);
    const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0];
    const t0 = Date.now();
    let done: Rollout[];
    let interrupted = false;
    try {
      done = await store.waitForRollouts({ rollout_ids: b.rollout_ids, timeout: chunk, signal });
    } catch (e) {
      if (!signal?.aborted) throw e;
      interrupted = true;
      done = await store.waitForRollouts({ rollout_ids: b.rollout_ids, timeout: 0 });
    }
    // The store returns before its deadline only when nothing it waits for is left pending.
    const settled =
      !interrupted && (Date.now() - t0 < chunk * 1000 || new Set(done.map((r) => r.rollout_id)).size === new Set(b.rollout_ids).size);
    c.header(WAIT_SETTLED_HEADER, String(settled));
    return c.json(done);
  });

  registerDashboardApi(api, store, metrics);
  app.route(API_PREFIX, api);
  if (dashboardOn) registerDashboardFiles(app);

  // OTLP/HTTP
  app.post("/v1/traces", otlpTracesHandler(store, { maxBytes: limit, log }));
  for (const p of ["/v1/metrics", "/v1/logs", "/v1/development/profiles"]) app.post(p, (c) => c.body(null, 501));

  if (metrics) {
    app.get("/metrics", async (c) => c.body(await metrics.render(), 200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" }));
  }
  return app;
}

/**
 * A request that failed because its client went away: node:http rejects the body read with an
 * ECONNRESET "aborted" (sometimes before the request's signal fires); Bun aborts the signal.
 */
function clientClosed(err: unknown, signal: AbortSignal): boolean {
  if (signal.aborted) return true;
  for (let e = err; e instanceof Error; e = e.cause) if ((e as { code?: unknown }).code === "ECONNRESET") return true;
  return false;
}
