/**
 * `LightningStoreClient`: a `LightningStore` over HTTP (`fetch`), for any runtime and browsers.
 *
 * - Retries with backoff only for network errors, 408, 429 and 5xx; before each retry it probes
 *   `GET /v1/agl/health` and gives up at once when the server stays down (docs/http-api.md#what-the-client-retries).
 *   Dequeues are never retried: a lost answer must not claim a second rollout.
 * - Every other write sends an `Idempotency-Key`, one per call and the same on each retry, so a retry
 *   after a lost answer gets the first answer instead of writing twice (docs/departures.md#23).
 * - Errors come back typed (ValidationError with issue paths, NotFoundError, ConflictError, ...).
 * - Single-item GETs give null for an unknown id: the server's `200 null` (docs/departures.md#2), an
 *   older Lightning server's 404, or Agent Lightning's 500 for an unknown rollout (not retried).
 * - Agent Lightning's own server works too: where it lacks a Lightning route (`/spans/batch`,
 *   `/spans/next/many`, `/attempts/finish`) the client falls back to the calls upstream's client makes,
 *   and remembers that for the rest of its life.
 * - `addManySpans` is one request (`/spans/batch`, one transaction on the server); `addOtelSpan`
 *   converts locally and lets the server assign the sequence id in the same request.
 * - `finishAttempt` (see finish.ts) is one request (`/attempts/finish`): an attempt's last spans, its
 *   final update and the claim of the next rollout; never retried when it claims.
 * - `waitForRollouts` waits any length with server long polls of up to 30 s each (docs/departures.md#8).
 * - What this process writes through the metrics API is sent along: after a request, at most every 5 s,
 *   and on `close()`, the process registry's changes go to `POST /v1/agl/metrics/push` (docs/metrics.md).
 */
import type {
  AttemptPatch,
  LightningStore,
  OtelReadableSpanLike,
  PageOptions,
  ResourcesQuery,
  RolloutOptions,
  RolloutPatch,
  RolloutQuery,
  SpanQuery,
  StartRolloutOptions,
  WaitOptions,
  WorkerQuery,
} from "../store/base.ts";
import { spanFromOpenTelemetry } from "../store/otel-span.ts";
import type {
  Attempt,
  AttemptedRollout,
  EnqueueRolloutRequest,
  NamedResourcesInput,
  PaginatedResult,
  ResourcesUpdate,
  Rollout,
  Span,
  StoreCapabilities,
  StoreStatistics,
  Worker,
} from "../types/index.ts";
import { LightningError, ValidationError } from "../types/index.ts";
import { getLogger } from "../platform/log.ts";
import { MetricsPusher } from "../metrics/push.ts";
import type { MetricsPush } from "../metrics/push-schema.ts";
import { type MetricsRegistry, processMetrics } from "../metrics/registry.ts";
import { StoreConnectionError, StoreHttpError, errorFromResponse, errorTypeOf, unansweredReason } from "./errors.ts";
import { finishWithCalls, type FinishAttemptRequest, type FinishAttemptResult } from "./finish.ts";
import { PREFERENCE_APPLIED_HEADER, PREFER_MINIMAL, sequenceIdsFromEcho, spansFromEcho, type SpanEcho } from "./span-batch.ts";
import { RequestSlots } from "./request-slots.ts";

export interface LightningStoreClientOptions {
  /** Bearer token sent with every request (the server's `--token`). */
  token?: string | null;
  /** Seconds slept before each retry; at most `1 + length` tries. Default [1, 2, 5]. */
  retryDelays?: readonly number[];
  /** Seconds between health probes after a failure; `[]` skips probing. Default [0.1, 0.2, 0.5]. */
  healthRetryDelays?: readonly number[];
  /** Per-request timeout in seconds (long polls get their hold time on top). Default 30. */
  requestTimeout?: number;
  /** Extra headers for every request. */
  headers?: Readonly<Record<string, string>>;
  /** The fetch implementation (default: the global one). */
  fetch?: typeof fetch;
  /**
   * Most requests in flight at once (long polls included); more wait in order. Keeps one client within
   * the server's per-address connection limit (128 by default, docs/server.md). Default 64.
   */
  maxConcurrentRequests?: number;
  /**
   * The registry whose changes this client sends to the server's Prometheus exposition (docs/metrics.md);
   * `false` sends none. Default: this process's (`processMetrics`, what `PrometheusMetricsBackend` writes).
   */
  metrics?: MetricsRegistry | false;
  /** Least seconds between two sends of metrics. Default 5. */
  metricsPushInterval?: number;
}

/** The server's long-poll answer header (see src/server/app.ts). */
const WAIT_SETTLED_HEADER = "agl-wait-settled";
/** Longest hold the client asks for; the server caps it at its own maximum (30 s by default). */
const LONG_POLL_SECONDS = 30;

const RETRYABLE_STATUS = (s: number): boolean => s === 408 || s === 429 || s >= 500;
/** Longest wait for the last send of metrics when the client closes. */
const FINAL_METRICS_PUSH_MS = 2000;

/** The request header of the IETF httpapi draft, honoured by the server's write routes (src/server/idempotency.ts). */
export const IDEMPOTENCY_KEY_HEADER = "idempotency-key";

/**
 * A fresh key in the draft's form (a structured-field string: a quoted UUID). Built from
 * `getRandomValues`, which every runtime has, even a browser page outside a secure context.
 */
export function newIdempotencyKey(): string {
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6]! & 0x0f) | 0x40;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `"${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}"`;
}

/**
 * Answers to a single-item GET that mean "no such item", besides `200 null`: an older Lightning server's
 * 404 NotFoundError, and Agent Lightning's 500 ResponseValidationError for an unknown rollout (its
 * response model refuses the null its store returned). The same every time, so never retried.
 */
const meansNoSuchItem = (status: number, text: string): boolean =>
  (status === 404 && errorTypeOf(text) === "NotFoundError") || (status === 500 && errorTypeOf(text) === "ResponseValidationError");

/** A route the server does not have: Agent Lightning answers 404 `{"detail": "Not Found"}` (405 beside its dashboard), ours RouteNotFound. */
const isMissingRoute = (err: unknown): boolean =>
  err instanceof StoreHttpError && (err.status === 405 || (err.status === 404 && err.errorType !== "NotFoundError"));

interface RequestOptions {
  body?: unknown;
  /** Extra request headers. */
  headers?: Readonly<Record<string, string>>;
  params?: Record<string, unknown>;
  retry?: boolean;
  /** A write: when it may be retried, it carries one `Idempotency-Key` for all its tries. */
  write?: boolean;
  /** Extra seconds on top of the request timeout (long polls). */
  holdSeconds?: number;
  signal?: AbortSignal;
  /** An error answer that stands for a null result instead. */
  nullWhen?: (status: number, text: string) => boolean;
}

interface Answer<T> {
  data: T;
  headers: Headers;
  /** The JSON text of the request body, when there was one. */
  sentBody?: string;
}

const sleep = (seconds: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, seconds * 1000);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });

function pathId(v: unknown, name: string): string {
  if (typeof v !== "string") throw new ValidationError(`${name} must be a string`, [name]);
  return encodeURIComponent(v);
}

/** Query string with repeated keys for lists; null/undefined values are left out. */
function queryString(params: Record<string, unknown>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null) continue;
    if (Array.isArray(v)) for (const x of v) q.append(k, String(x));
    else q.append(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}

export class LightningStoreClient implements LightningStore {
  readonly capabilities: StoreCapabilities = Object.freeze({ thread_safe: true, async_safe: true, zero_copy: true, otlp_traces: true });
  /** `http://host:port` without a trailing slash. */
  readonly serverAddress: string;
  private readonly base: string;
  private readonly retryDelays: readonly number[];
  private readonly healthDelays: readonly number[];
  private readonly timeoutMs: number;
  private readonly headers: Record<string, string>;
  private readonly fetchFn: typeof fetch;
  /** Requests in flight, aborted by `close()`. */
  private readonly inFlight = new Set<AbortController>();
  private readonly slots: RequestSlots;
  private readonly metricsPusher: MetricsPusher | null;
  private closed = false;

  constructor(serverAddress: string, options: LightningStoreClientOptions = {}) {
    this.serverAddress = serverAddress.replace(/\/+$/, "");
    this.base = `${this.serverAddress}/v1/agl`;
    this.retryDelays = options.retryDelays ?? [1, 2, 5];
    this.healthDelays = options.healthRetryDelays ?? [0.1, 0.2, 0.5];
    this.timeoutMs = (options.requestTimeout ?? 30) * 1000;
    this.headers = { ...(options.headers ?? {}) };
    if (options.token) this.headers["authorization"] = `Bearer ${options.token}`;
    this.fetchFn = options.fetch ?? ((input, init) => fetch(input, init));
    this.slots = new RequestSlots(options.maxConcurrentRequests ?? 64);
    const metrics = options.metrics ?? processMetrics;
    this.metricsPusher =
      metrics === false
        ? null
        : new MetricsPusher(metrics, (push, final) => this.pushMetrics(push, final), {
            intervalMs: (options.metricsPushInterval ?? 5) * 1000,
            log: getLogger("agentlightning.metrics"),
            isMissingRoute,
            isTransient: (e) => e instanceof StoreConnectionError || (e instanceof LightningError && RETRYABLE_STATUS(e.status)),
          });
  }

  /** Sends a registry's changes to the server's exposition (see `metrics`); the last one, on close, is tried once, briefly. */
  private async pushMetrics(push: MetricsPush, final: boolean): Promise<void> {
    await this.call("POST", "/metrics/push", {
      body: push,
      write: true,
      ...(final ? { retry: false, signal: AbortSignal.timeout(FINAL_METRICS_PUSH_MS) } : {}),
    });
  }

  /** The OTLP/HTTP traces endpoint of the same server. */
  otlpTracesEndpoint(): string {
    return `${this.serverAddress}/v1/traces`;
  }

  /** True when `GET /v1/agl/health` answers 200 within the request timeout. */
  async health(): Promise<boolean> {
    return (await this.healthProblem()) === null;
  }

  /**
   * Resolves when the server answers its health check (asked again after each of `healthRetryDelays`,
   * so a server still starting is waited for a moment); else throws a StoreConnectionError, one line
   * naming the server's address and why. For a program's start: a wrong address or a store not
   * running is then said once, before any work, not by every later call.
   */
  async checkHealth(): Promise<void> {
    let problem = await this.healthProblem();
    for (const delay of this.healthDelays) {
      if (problem === null) return;
      await sleep(delay);
      problem = await this.healthProblem();
    }
    if (problem !== null)
      throw new StoreConnectionError(
        `no LightningStore answers at ${this.serverAddress} (GET /v1/agl/health: ${problem}): is \`agl store\` running there?`,
      );
  }

  /** Why `GET /v1/agl/health` did not answer 200, or null when it did. */
  private async healthProblem(): Promise<string | null> {
    try {
      return await this.withSignal(0, undefined, async (signal) => {
        const res = await this.fetchFn(`${this.base}/health`, { headers: this.headers, signal });
        await res.body?.cancel();
        return res.status === 200 ? null : `HTTP ${res.status}`;
      });
    } catch (e) {
      return unansweredReason(e);
    }
  }

  /**
   * Runs one fetch under its own AbortController: aborted by the request timeout, the caller's signal
   * or `close()`. (A plain controller with a timer per request: `AbortSignal.any` over a long-lived
   * signal plus `AbortSignal.timeout` piles up dependents and timers in Node 20 and slows every request.)
   */
  private async withSignal<T>(holdSeconds: number, caller: AbortSignal | undefined, run: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const ac = new AbortController();
    const timer = setTimeout(
      () => ac.abort(new DOMException(`request timed out after ${this.timeoutMs / 1000 + holdSeconds} s`, "TimeoutError")),
      this.timeoutMs + holdSeconds * 1000,
    );
    const onCallerAbort = () => ac.abort(caller!.reason);
    if (caller) {
      if (caller.aborted) onCallerAbort();
      else caller.addEventListener("abort", onCallerAbort, { once: true });
    }
    this.inFlight.add(ac);
    try {
      return await this.slots.run(ac.signal, () => run(ac.signal));
    } finally {
      clearTimeout(timer);
      caller?.removeEventListener("abort", onCallerAbort);
      this.inFlight.delete(ac);
    }
  }

  /** After a retryable failure: probe health once per configured delay (and once more); false if never healthy. */
  private async serverCameBack(signal?: AbortSignal): Promise<boolean> {
    if (this.healthDelays.length === 0) return true;
    for (const delay of [...this.healthDelays, 0]) {
      if (await this.health()) return true;
      if (delay > 0) await sleep(delay, signal);
    }
    return false;
  }

  private async request<T>(method: "GET" | "POST", path: string, o: RequestOptions = {}): Promise<Answer<T>> {
    const url = `${this.base}${path}${o.params ? queryString(o.params) : ""}`;
    const tries = o.retry === false ? 1 : 1 + this.retryDelays.length;
    const keyed = o.write === true && tries > 1;
    const init: RequestInit = { method, headers: o.headers || keyed ? { ...this.headers, ...o.headers } : this.headers };
    // Built once: every retry sends the same body text and the same key.
    if (keyed) (init.headers as Record<string, string>)[IDEMPOTENCY_KEY_HEADER] = newIdempotencyKey();
    let sentBody: string | undefined;
    if (o.body !== undefined) {
      init.body = sentBody = JSON.stringify(o.body);
      init.headers = { ...(init.headers as Record<string, string>), "content-type": "application/json" };
    }
    let last: LightningError | null = null;
    for (let i = 0; i < tries; i++) {
      if (i > 0) await sleep(this.retryDelays[i - 1]!, o.signal);
      let status = 0;
      let text = "";
      let headers: Headers | null = null;
      try {
        await this.withSignal(o.holdSeconds ?? 0, o.signal, async (signal) => {
          const res = await this.fetchFn(url, { ...init, signal });
          text = await res.text();
          status = res.status;
          headers = res.headers;
        });
      } catch (e) {
        if (o.signal?.aborted) throw o.signal.reason;
        if (this.closed) throw new StoreConnectionError(`${method} ${url}: the client was closed`);
        last = new StoreConnectionError(`${method} ${url}: ${unansweredReason(e)}`, { cause: e });
      }
      if (headers !== null) {
        this.metricsPusher?.nudge();
        if (status >= 200 && status < 300) return { data: (text === "" ? null : JSON.parse(text)) as T, headers, sentBody };
        if (o.nullWhen?.(status, text)) return { data: null as T, headers, sentBody };
        last = errorFromResponse(status, text, `${method} ${path}`);
        if (!RETRYABLE_STATUS(status)) throw last;
      }
      // Retry only while the server answers its health check.
      if (i + 1 < tries && !(await this.serverCameBack(o.signal))) break;
    }
    throw last!;
  }

  private async call<T>(method: "GET" | "POST", path: string, o?: RequestOptions): Promise<T> {
    return (await this.request<T>(method, path, o)).data;
  }

  /** A single-item GET: null for an unknown id, whichever way the server says so (see `meansNoSuchItem`). */
  private getOrNull<T>(path: string): Promise<T | null> {
    return this.call<T | null>("GET", path, { nullWhen: meansNoSuchItem });
  }

  /** Lightning routes the server turned out not to have (Agent Lightning's own server). */
  private readonly missingRoutes = new Set<string>();

  /** `viaRoute` unless the server lacks `route`; then, now and from then on, what upstream's client does instead. */
  private async unlessMissing<T>(route: string, viaRoute: () => Promise<T>, viaUpstreamCalls: () => Promise<T>): Promise<T> {
    if (!this.missingRoutes.has(route)) {
      try {
        return await viaRoute();
      } catch (e) {
        if (!isMissingRoute(e)) throw e;
        this.missingRoutes.add(route);
      }
    }
    return viaUpstreamCalls();
  }

  /** Upstream's client's way to store spans: a sequence id from `/spans/next` for each span without one, then one `POST /spans` each; duplicates (null answers) are left out. */
  private async addSpansOneByOne(spans: readonly Span[]): Promise<Span[]> {
    const out: Span[] = [];
    for (const s of spans) {
      const sequenceId = (s.sequence_id as number | null | undefined) ?? (await this.getNextSpanSequenceId(s.rollout_id, s.attempt_id));
      const stored = await this.addSpan({ ...s, sequence_id: sequenceId });
      if (stored !== null) out.push(stored);
    }
    return out;
  }

  // Rollouts and the queue

  startRollout(input: unknown, options: StartRolloutOptions = {}): Promise<AttemptedRollout> {
    return this.call("POST", "/rollouts", { body: { ...options, input }, write: true });
  }

  async enqueueRollout(input: unknown, options: RolloutOptions = {}): Promise<Rollout> {
    const out = await this.call<Rollout[]>("POST", "/queues/rollouts/enqueue", {
      body: { rollouts: [{ ...options, input }] },
      write: true,
    });
    if (!out[0]) throw new LightningError("the server enqueued nothing");
    return out[0];
  }

  async enqueueManyRollouts(requests: EnqueueRolloutRequest[]): Promise<Rollout[]> {
    if (Array.isArray(requests) && requests.length === 0) return [];
    return this.call("POST", "/queues/rollouts/enqueue", { body: { rollouts: requests }, write: true });
  }

  async dequeueRollout(options: { worker_id?: string | null } = {}): Promise<AttemptedRollout | null> {
    return (await this.dequeueManyRollouts({ limit: 1, worker_id: options.worker_id ?? null }))[0] ?? null;
  }

  async dequeueManyRollouts(options: { limit?: number; worker_id?: string | null } = {}): Promise<AttemptedRollout[]> {
    const limit = options.limit ?? 1;
    if (Number.isInteger(limit) && limit <= 0) return [];
    const body: Record<string, unknown> = { limit };
    if (options.worker_id !== undefined && options.worker_id !== null) body.worker_id = options.worker_id;
    return this.call("POST", "/queues/rollouts/dequeue", { body, retry: false });
  }

  startAttempt(rolloutId: string, options: { worker_id?: string | null } = {}): Promise<AttemptedRollout> {
    const body = options.worker_id === undefined || options.worker_id === null ? undefined : { worker_id: options.worker_id };
    return this.call("POST", `/rollouts/${pathId(rolloutId, "rollout_id")}/attempts`, { body, write: true });
  }

  queryRollouts(query: RolloutQuery = {}): Promise<PaginatedResult<Rollout | AttemptedRollout>> {
    return this.allPages(query, (page) => this.call("POST", "/rollouts/search", { body: { ...query, ...page } }));
  }

  getRolloutById(rolloutId: string): Promise<Rollout | AttemptedRollout | null> {
    return this.getOrNull(`/rollouts/${pathId(rolloutId, "rollout_id")}`);
  }

  updateRollout(rolloutId: string, patch: RolloutPatch): Promise<Rollout> {
    return this.call("POST", `/rollouts/${pathId(rolloutId, "rollout_id")}`, { body: patch, write: true });
  }

  /**
   * Waits with long polls: each request is held by the server until the rollouts finish or its cap;
   * the loop ends when the server says nothing is left to wait for, or at the caller's timeout.
   */
  async waitForRollouts(options: WaitOptions): Promise<Rollout[]> {
    const { signal } = options;
    signal?.throwIfAborted();
    const timeout = options.timeout ?? null;
    if (typeof timeout === "number" && Number.isNaN(timeout))
      throw new ValidationError("timeout must be a number of seconds or null", ["timeout"]);
    const deadline = typeof timeout === "number" ? Date.now() + Math.max(0, timeout) * 1000 : null;
    for (;;) {
      const remaining = deadline === null ? null : Math.max(0, deadline - Date.now()) / 1000;
      const hold = remaining === null ? LONG_POLL_SECONDS : Math.min(remaining, LONG_POLL_SECONDS);
      // The server is asked for no more than this poll's hold: Agent Lightning's server waits as long as it is told (forever for null).
      const t0 = performance.now();
      const { data, headers } = await this.request<Rollout[]>("POST", "/waits/rollouts", {
        body: { rollout_ids: options.rollout_ids, timeout: hold },
        holdSeconds: hold,
        signal,
      });
      const header = headers.get(WAIT_SETTLED_HEADER);
      // Without our header (Agent Lightning's server), an answer before the hold was up means nothing was left to wait for.
      const settled = header === null ? performance.now() - t0 < hold * 1000 : header === "true";
      if (settled || (deadline !== null && Date.now() >= deadline) || remaining === 0) return data;
    }
  }

  // Attempts

  queryAttempts(rolloutId: string, query: PageOptions = {}): Promise<PaginatedResult<Attempt>> {
    const path = `/rollouts/${pathId(rolloutId, "rollout_id")}/attempts/search`;
    return this.allPages(query, (page) => this.call("POST", path, { body: { ...query, ...page } }));
  }

  getLatestAttempt(rolloutId: string): Promise<Attempt | null> {
    return this.getOrNull(`/rollouts/${pathId(rolloutId, "rollout_id")}/attempts/latest`);
  }

  updateAttempt(rolloutId: string, attemptId: string, patch: AttemptPatch): Promise<Attempt> {
    return this.call("POST", `/rollouts/${pathId(rolloutId, "rollout_id")}/attempts/${pathId(attemptId, "attempt_id")}`, {
      body: patch,
      write: true,
    });
  }

  // Resources

  addResources(resources: NamedResourcesInput): Promise<ResourcesUpdate> {
    return this.call("POST", "/resources", { body: resources, write: true });
  }

  updateResources(resourcesId: string, resources: NamedResourcesInput): Promise<ResourcesUpdate> {
    return this.call("POST", `/resources/${pathId(resourcesId, "resources_id")}`, { body: resources, write: true });
  }

  getLatestResources(): Promise<ResourcesUpdate | null> {
    return this.getOrNull("/resources/latest");
  }

  getResourcesById(resourcesId: string): Promise<ResourcesUpdate | null> {
    return this.getOrNull(`/resources/${pathId(resourcesId, "resources_id")}`);
  }

  queryResources(query: ResourcesQuery = {}): Promise<PaginatedResult<ResourcesUpdate>> {
    return this.allPages(query, (page) => this.call("GET", "/resources", { params: { ...query, ...page } }));
  }

  // Spans

  async getNextSpanSequenceId(rolloutId: string, attemptId: string): Promise<number> {
    return (
      await this.call<{ sequence_id: number }>("POST", "/spans/next", {
        body: { rollout_id: rolloutId, attempt_id: attemptId },
        write: true,
      })
    ).sequence_id;
  }

  async getManySpanSequenceIds(pairs: readonly (readonly [string, string])[]): Promise<number[]> {
    if (Array.isArray(pairs) && pairs.length === 0) return [];
    return this.unlessMissing(
      "/spans/next/many",
      async () => (await this.call<{ sequence_ids: number[] }>("POST", "/spans/next/many", { body: { pairs }, write: true })).sequence_ids,
      async () => {
        const ids: number[] = [];
        for (const [rolloutId, attemptId] of pairs) ids.push(await this.getNextSpanSequenceId(rolloutId, attemptId));
        return ids;
      },
    );
  }

  addSpan(span: Span): Promise<Span | null> {
    return this.call("POST", "/spans", { body: span, write: true });
  }

  /** One request and one server transaction for the whole batch; spans may leave `sequence_id` out. */
  async addManySpans(spans: Span[]): Promise<Span[]> {
    if (Array.isArray(spans) && spans.length === 0) return [];
    return this.postSpanBatch(spans);
  }

  async addOtelSpan(rolloutId: string, attemptId: string, span: OtelReadableSpanLike, sequenceId?: number | null): Promise<Span | null> {
    const converted: Record<string, unknown> = { ...spanFromOpenTelemetry(span, rolloutId, attemptId, sequenceId ?? 0) };
    if (sequenceId === undefined || sequenceId === null) converted.sequence_id = null;
    return (await this.postSpanBatch([converted]))[0] ?? null;
  }

  /**
   * Like `addManySpans`, for a caller that keeps its own spans and needs only their sequence ids (in
   * request order, duplicates left out): the answer is not rebuilt into spans.
   */
  async addManySpansForSequenceIds(spans: Span[]): Promise<number[]> {
    if (Array.isArray(spans) && spans.length === 0) return [];
    return this.unlessMissing(
      "/spans/batch",
      async () =>
        sequenceIdsFromEcho(
          (await this.request<SpanEcho[]>("POST", "/spans/batch", { body: { spans }, headers: PREFER_MINIMAL, write: true })).data,
        ),
      async () => (await this.addSpansOneByOne(spans)).map((s) => s.sequence_id),
    );
  }

  /**
   * The end of an attempt in one request (`POST /attempts/finish`): spans, final update, then the claim.
   * A failure throws the failing part's typed error; `finishFailure(err)` says which parts were stored.
   */
  async finishAttempt(request: FinishAttemptRequest): Promise<FinishAttemptResult> {
    const { spans, claim, ...rest } = request;
    const body: Record<string, unknown> = rest;
    if (spans !== undefined && !(Array.isArray(spans) && spans.length === 0)) body.spans = spans;
    if (claim !== undefined && claim !== null)
      body.claim = claim.worker_id === undefined || claim.worker_id === null ? {} : { worker_id: claim.worker_id };
    return this.unlessMissing(
      "/attempts/finish",
      async () => {
        const answer = await this.request<{ spans: SpanEcho[]; attempt: Attempt; next: AttemptedRollout | null }>(
          "POST",
          "/attempts/finish",
          {
            body,
            headers: PREFER_MINIMAL,
            // A claim is never re-sent (a lost answer must not claim twice); without one it is a keyed write.
            retry: body.claim === undefined,
            write: true,
          },
        );
        const { attempt, next } = answer.data;
        return { sequence_ids: sequenceIdsFromEcho(answer.data.spans), attempt, next };
      },
      () => finishWithCalls(this, request),
    );
  }

  /** `POST /spans/batch` asking for the minimal answer; a server that ignores the preference sends the spans. */
  private postSpanBatch(spans: readonly unknown[]): Promise<Span[]> {
    return this.unlessMissing(
      "/spans/batch",
      async () => {
        const answer = await this.request<SpanEcho[]>("POST", "/spans/batch", { body: { spans }, headers: PREFER_MINIMAL, write: true });
        if (answer.headers.get(PREFERENCE_APPLIED_HEADER) !== "return=minimal") return answer.data as Span[];
        return spansFromEcho(answer.sentBody!, answer.data);
      },
      () => this.addSpansOneByOne(spans as Span[]),
    );
  }

  querySpans(rolloutId: string, query: SpanQuery = {}): Promise<PaginatedResult<Span>> {
    return this.allPages(query, (page) => this.call("POST", "/spans/search", { body: { ...query, ...page, rollout_id: rolloutId } }));
  }

  // Workers

  updateWorker(workerId: string, heartbeatStats?: Record<string, unknown>): Promise<Worker> {
    const body = heartbeatStats === undefined ? undefined : { heartbeat_stats: heartbeatStats };
    return this.call("POST", `/workers/${pathId(workerId, "worker_id")}`, { body, write: true });
  }

  getWorkerById(workerId: string): Promise<Worker | null> {
    return this.getOrNull(`/workers/${pathId(workerId, "worker_id")}`);
  }

  queryWorkers(query: WorkerQuery = {}): Promise<PaginatedResult<Worker>> {
    return this.allPages(query, (page) => this.call("POST", "/workers/search", { body: { ...query, ...page } }));
  }

  /**
   * A query asked page by page until it holds what the caller asked for: every match for no limit or -1,
   * else `limit` of them. A server answers everything at once unless it was started with a page cap
   * (docs/http-api.md#list-answers); a page that ends before the answer's `total` is followed by a request
   * for the rest. The pages are separate reads: rows added or removed between two of them can shift the
   * later pages (as with any offset paging). The result echoes the caller's limit and offset.
   */
  private async allPages<T>(
    query: PageOptions,
    fetchPage: (page: { limit: number; offset: number }) => Promise<PaginatedResult<T>>,
  ): Promise<PaginatedResult<T>> {
    const limit = query.limit ?? -1;
    const offset = query.offset ?? 0;
    let page = await fetchPage({ limit, offset });
    const wanted = limit === -1 ? Infinity : limit;
    const items = page.items;
    for (;;) {
      if (items.length >= wanted || page.items.length === 0 || offset + items.length >= page.total) break;
      page = await fetchPage({ limit: wanted === Infinity ? -1 : wanted - items.length, offset: offset + items.length });
      for (const item of page.items) items.push(item);
    }
    return { items, limit, offset, total: page.total };
  }

  statistics(): Promise<StoreStatistics> {
    return this.call("GET", "/statistics");
  }

  /** Sends the last metrics, then aborts requests in flight; the server and its store keep running. Safe to call twice. */
  async close(): Promise<void> {
    if (this.closed) return;
    // What this process wrote since the last send goes before the client stops.
    await this.metricsPusher?.close();
    this.closed = true;
    for (const ac of this.inFlight) ac.abort(new StoreConnectionError("the client was closed"));
  }
}
