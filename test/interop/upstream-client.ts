/**
 * Agent Lightning v0.3.0's Python `LightningStoreClient` (agentlightning/store/client_server.py),
 * replayed request for request: each method sends what the Python method sends through aiohttp (method,
 * path, query parameters in order, the body as `json.dumps` writes it with its nulls and left-out keys,
 * aiohttp's default headers) and reads the answer the way the Python method does, validating it with
 * the mirrored pydantic models. Method names are the Python ones; `undefined` stands for upstream's
 * `UNSET` (the key is left out) and `null` for `None`.
 *
 * Where the Python method would raise (`raise_for_status`, a pydantic error, aiohttp's content-type
 * check in `resp.json()`), this throws; a lookup that Python would swallow after logging an ERROR with a
 * traceback throws here too, so that the tests see every answer Python would complain about.
 */
import { gunzipSync } from "node:zlib";
import { request } from "undici";
import type { z } from "zod";
import { pyDumps, pyFloat, type PyFloat } from "./python-json.ts";
import * as M from "./upstream-models.ts";

/** What aiohttp 3.12 sends with every request when nothing else is set. */
export const AIOHTTP_HEADERS: Readonly<Record<string, string>> = {
  accept: "*/*",
  "accept-encoding": "gzip, deflate",
  "user-agent": "Python/3.12 aiohttp/3.12.15",
};

export interface SentRequest {
  method: "GET" | "POST";
  /** Path under the server root, query string included. */
  url: string;
  headers: Record<string, string>;
  /** The exact body text (absent: no body). */
  body?: string;
}

export interface Answer {
  status: number;
  contentType: string;
  text: string;
  json: unknown;
}

export interface Exchange {
  /** The client method that sent it (the outermost one: `add_many_spans`, not its `add_span`s). */
  method: string;
  request: SentRequest;
  answer: Answer;
}

/** `aiohttp.ClientResponseError` from `raise_for_status()`, or a failed read of the answer. */
export class UpstreamClientError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

type Params = readonly (readonly [string, string | number])[];

/**
 * yarl's percent-encoding (aiohttp builds every URL with yarl): unreserved characters, `!$'()*,` and the
 * given safe ones stay; in a query a space is `+` and `+&=;` are escaped; everything else is UTF-8 `%XX`.
 */
function yarlQuote(s: string, safe: string, query: boolean): string {
  const keep = /[A-Za-z0-9\-._~!$'()*,]/;
  let out = "";
  for (const ch of s) {
    if (keep.test(ch) || safe.includes(ch)) out += ch;
    else if (query && ch === " ") out += "+";
    else for (const b of new TextEncoder().encode(ch)) out += `%${b.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

/** A path as yarl quotes it (`/`, `@`, `:` and `+` stay). */
const quotePath = (path: string): string => yarlQuote(path, "/@:+", false);

/** Query string as yarl writes `params=[(k, v), ...]`: in order, ints as decimal. */
function queryString(params: Params | undefined): string {
  if (!params || params.length === 0) return "";
  return `?${params.map(([k, v]) => `${yarlQuote(k, "?/:@", true)}=${yarlQuote(String(v), "?/:@", true)}`).join("&")}`;
}

// Payload builders: `model_dump()` of upstream's request models, keys in declaration order.

export interface RolloutConfigArgs {
  timeout_seconds?: number | null;
  unresponsive_seconds?: number | null;
  max_attempts?: number;
  retry_condition?: string[];
}

/** `RolloutConfig(...).model_dump()`: every field, floats as floats. */
export function rolloutConfig(c: RolloutConfigArgs = {}): Record<string, unknown> {
  const f = (v: number | null | undefined): PyFloat | null => (v === null || v === undefined ? null : pyFloat(v));
  return {
    timeout_seconds: f(c.timeout_seconds),
    unresponsive_seconds: f(c.unresponsive_seconds),
    max_attempts: c.max_attempts ?? 1,
    retry_condition: c.retry_condition ?? [],
  };
}

export interface EnqueueArgs {
  input: unknown;
  mode?: "train" | "val" | "test" | null;
  resources_id?: string | null;
  config?: RolloutConfigArgs | null;
  metadata?: Record<string, unknown> | null;
}

/** `EnqueueRolloutRequest(...).model_dump(exclude_none=False)`. */
const enqueueRequest = (a: EnqueueArgs): Record<string, unknown> => ({
  input: a.input,
  mode: a.mode ?? null,
  resources_id: a.resources_id ?? null,
  config: a.config ? rolloutConfig(a.config) : null,
  metadata: a.metadata ?? null,
});

export type NamedResourcesArgs = Record<string, Record<string, unknown>>;

/** `TypeAdapter(NamedResources).dump_python(resources)`: each resource model with all its fields. */
export function namedResources(resources: NamedResourcesArgs): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, r] of Object.entries(resources)) {
    if (r.resource_type === "prompt_template") out[name] = { resource_type: r.resource_type, template: r.template, engine: r.engine };
    else
      out[name] = {
        resource_type: r.resource_type ?? "llm",
        endpoint: r.endpoint,
        model: r.model,
        api_key: r.api_key ?? null,
        sampling_parameters: r.sampling_parameters ?? {},
      };
  }
  return out;
}

/** Every public method of upstream's `LightningStoreClient` that talks to the server. */
export const UPSTREAM_CLIENT_METHODS = [
  "statistics",
  "start_rollout",
  "enqueue_rollout",
  "enqueue_many_rollouts",
  "dequeue_rollout",
  "dequeue_many_rollouts",
  "start_attempt",
  "query_rollouts",
  "query_attempts",
  "get_latest_attempt",
  "get_rollout_by_id",
  "query_resources",
  "add_resources",
  "update_resources",
  "get_resources_by_id",
  "get_latest_resources",
  "add_span",
  "add_many_spans",
  "get_next_span_sequence_id",
  "get_many_span_sequence_ids",
  "add_otel_span",
  "wait_for_rollouts",
  "query_spans",
  "update_rollout",
  "update_attempt",
  "query_workers",
  "get_worker_by_id",
  "update_worker",
  // `_wait_until_healthy`, run between retries
  "health",
] as const;

export type UpstreamMethod = (typeof UPSTREAM_CLIENT_METHODS)[number];

/** `Span.model_dump(mode="json")` of a span a Python runner built; sequence id and the rest as given. */
export type UpstreamSpan = Record<string, unknown>;

export class UpstreamStoreClient {
  /** Every request sent and its answer, in order. */
  readonly exchanges: Exchange[] = [];
  private readonly root: string;
  private readonly headers: Record<string, string>;
  private current: UpstreamMethod | null = null;
  private readonly seen = new Set<UpstreamMethod>();

  /**
   * @param serverAddress `http://host:port` (a trailing slash is dropped, as upstream does)
   * @param extraHeaders headers a subclass adds to the aiohttp session (the bearer token of `agl store --token`)
   */
  constructor(serverAddress: string, extraHeaders: Record<string, string> = {}) {
    this.root = serverAddress.replace(/\/+$/, "");
    this.headers = { ...AIOHTTP_HEADERS, ...extraHeaders };
  }

  /** The methods called so far, those called by other methods included. */
  called(): ReadonlySet<UpstreamMethod> {
    return this.seen;
  }

  /** One aiohttp request: `session.get/post(url, json=..., params=...)`, then `raise_for_status()` and `resp.json()`. */
  private async send(method: "GET" | "POST", path: string, o: { json?: unknown; params?: Params } = {}): Promise<unknown> {
    const url = `${quotePath(`/v1/agl${path}`)}${queryString(o.params)}`;
    const headers = { ...this.headers };
    const body = o.json === undefined || o.json === null ? undefined : pyDumps(o.json);
    if (body !== undefined) headers["content-type"] = "application/json";
    const res = await request(`${this.root}${url}`, { method, headers, body });
    const raw = Buffer.from(await res.body.arrayBuffer());
    const encoding = String(res.headers["content-encoding"] ?? "");
    const text = (encoding === "gzip" ? gunzipSync(raw) : raw).toString("utf8");
    const contentType = String(res.headers["content-type"] ?? "");
    let json: unknown;
    const answer: Answer = { status: res.statusCode, contentType, text, json };
    this.exchanges.push({
      method: this.current ?? "?",
      request: { method, url, headers, ...(body === undefined ? {} : { body }) },
      answer,
    });
    if (res.statusCode >= 400) throw new UpstreamClientError(res.statusCode, `${res.statusCode} for ${method} ${url}: ${text}`);
    // aiohttp's resp.json() refuses any other content type; an empty body reads as None.
    if (contentType.split(";")[0]!.trim() !== "application/json")
      throw new UpstreamClientError(res.statusCode, `ContentTypeError: ${contentType} for ${method} ${url}`);
    json = text.trim() === "" ? null : (JSON.parse(text) as unknown);
    answer.json = json;
    return json;
  }

  private async call<T>(method: UpstreamMethod, run: () => Promise<T>): Promise<T> {
    const outer = this.current;
    this.current ??= method;
    this.seen.add(method);
    try {
      return await run();
    } finally {
      this.current = outer;
    }
  }

  /** `Model.model_validate(data)`; a failure is the pydantic ValidationError Python would raise. */
  private validate<S extends z.ZodType>(schema: S, data: unknown, what: string): z.infer<S> {
    const out = schema.safeParse(data);
    if (!out.success)
      throw new UpstreamClientError(0, `pydantic would reject ${what}: ${JSON.stringify(out.error.issues)}\n${JSON.stringify(data)}`);
    return out.data;
  }

  private paginated<S extends z.ZodType>(item: S, data: unknown, what: string) {
    return this.validate(M.PaginatedResult(item), data, what);
  }

  health() {
    return this.call("health", async () => this.validate(M.Health, await this.send("GET", "/health"), "health"));
  }

  statistics() {
    return this.call("statistics", async () => this.validate(M.Statistics, await this.send("GET", "/statistics"), "statistics"));
  }

  start_rollout(input: unknown, o: Omit<EnqueueArgs, "input"> & { worker_id?: string | null } = {}) {
    return this.call("start_rollout", async () => {
      const json = { ...enqueueRequest({ input, ...o }), worker_id: o.worker_id ?? null };
      return this.validate(M.AttemptedRollout, await this.send("POST", "/rollouts", { json }), "AttemptedRollout");
    });
  }

  enqueue_rollout(input: unknown, o: Omit<EnqueueArgs, "input"> = {}) {
    return this.call("enqueue_rollout", async () => {
      const data = await this.send("POST", "/queues/rollouts/enqueue", { json: { rollouts: [enqueueRequest({ input, ...o })] } });
      if (!Array.isArray(data) || data.length === 0) throw new UpstreamClientError(0, "RuntimeError: enqueue_rollout returned no rollouts");
      return this.validate(M.Rollout, data[0], "Rollout");
    });
  }

  enqueue_many_rollouts(rollouts: EnqueueArgs[]) {
    return this.call("enqueue_many_rollouts", async () => {
      if (rollouts.length === 0) return [];
      const data = await this.send("POST", "/queues/rollouts/enqueue", { json: { rollouts: rollouts.map(enqueueRequest) } });
      return this.validate(M.Rollout.array(), data, "list[Rollout]");
    });
  }

  /** `_dequeue_batch`: no retries; upstream turns any error into `[]`, here it throws so the test sees it. */
  private dequeue(limit: number, worker_id: string | null) {
    return (async () => {
      if (limit <= 0) return [];
      const json: Record<string, unknown> = { limit };
      if (worker_id !== null) json.worker_id = worker_id;
      return this.validate(
        M.AttemptedRollout.array(),
        await this.send("POST", "/queues/rollouts/dequeue", { json }),
        "list[AttemptedRollout]",
      );
    })();
  }

  dequeue_rollout(worker_id: string | null = null) {
    return this.call("dequeue_rollout", async () => (await this.dequeue(1, worker_id))[0] ?? null);
  }

  dequeue_many_rollouts(o: { limit?: number; worker_id?: string | null } = {}) {
    return this.call("dequeue_many_rollouts", () => this.dequeue(o.limit ?? 1, o.worker_id ?? null));
  }

  start_attempt(rollout_id: string, worker_id: string | null = null) {
    return this.call("start_attempt", async () => {
      const json = worker_id !== null ? { worker_id } : undefined;
      return this.validate(M.AttemptedRollout, await this.send("POST", `/rollouts/${rollout_id}/attempts`, { json }), "AttemptedRollout");
    });
  }

  query_rollouts(
    o: {
      status_in?: string[] | null;
      rollout_id_in?: string[] | null;
      rollout_id_contains?: string | null;
      filter_logic?: "and" | "or";
      sort_by?: string | null;
      sort_order?: "asc" | "desc";
      limit?: number;
      offset?: number;
      status?: string[] | null;
      rollout_ids?: string[] | null;
    } = {},
  ) {
    return this.call("query_rollouts", async () => {
      const status = o.status_in ?? o.status ?? null;
      const ids = o.rollout_id_in ?? o.rollout_ids ?? null;
      const json: Record<string, unknown> = { limit: o.limit ?? -1, offset: o.offset ?? 0 };
      if (status !== null) json.status_in = status;
      if (ids !== null) json.rollout_id_in = ids;
      if (o.rollout_id_contains != null) json.rollout_id_contains = o.rollout_id_contains;
      json.filter_logic = o.filter_logic ?? "and";
      if (o.sort_by != null) {
        json.sort_by = o.sort_by;
        json.sort_order = o.sort_order ?? "asc";
      }
      return this.paginated(
        M.RolloutOrAttempted,
        await this.send("POST", "/rollouts/search", { json }),
        "PaginatedResult[Rollout|AttemptedRollout]",
      );
    });
  }

  query_attempts(rollout_id: string, o: { sort_by?: string | null; sort_order?: "asc" | "desc"; limit?: number; offset?: number } = {}) {
    return this.call("query_attempts", async () => {
      const json: Record<string, unknown> = { limit: o.limit ?? -1, offset: o.offset ?? 0 };
      const sortBy = o.sort_by === undefined ? "sequence_id" : o.sort_by;
      if (sortBy !== null) {
        json.sort_by = sortBy;
        json.sort_order = o.sort_order ?? "asc";
      }
      return this.paginated(
        M.Attempt,
        await this.send("POST", `/rollouts/${rollout_id}/attempts/search`, { json }),
        "PaginatedResult[Attempt]",
      );
    });
  }

  get_latest_attempt(rollout_id: string) {
    return this.call("get_latest_attempt", async () => {
      const data = await this.send("GET", `/rollouts/${rollout_id}/attempts/latest`);
      return data ? this.validate(M.Attempt, data, "Attempt") : null;
    });
  }

  get_rollout_by_id(rollout_id: string) {
    return this.call("get_rollout_by_id", async () => {
      const data = await this.send("GET", `/rollouts/${rollout_id}`);
      if (data === null) return null;
      return this.validate(M.RolloutOrAttempted, data, "Rollout|AttemptedRollout");
    });
  }

  query_resources(
    o: {
      resources_id?: string | null;
      resources_id_contains?: string | null;
      sort_by?: string | null;
      sort_order?: "asc" | "desc";
      limit?: number;
      offset?: number;
    } = {},
  ) {
    return this.call("query_resources", async () => {
      const params: [string, string | number][] = [
        ["limit", o.limit ?? -1],
        ["offset", o.offset ?? 0],
      ];
      if (o.sort_by != null) params.push(["sort_by", o.sort_by], ["sort_order", o.sort_order ?? "asc"]);
      if (o.resources_id != null) params.push(["resources_id", o.resources_id]);
      if (o.resources_id_contains != null) params.push(["resources_id_contains", o.resources_id_contains]);
      return this.paginated(M.ResourcesUpdate, await this.send("GET", "/resources", { params }), "PaginatedResult[ResourcesUpdate]");
    });
  }

  add_resources(resources: NamedResourcesArgs) {
    return this.call("add_resources", async () =>
      this.validate(M.ResourcesUpdate, await this.send("POST", "/resources", { json: namedResources(resources) }), "ResourcesUpdate"),
    );
  }

  update_resources(resources_id: string, resources: NamedResourcesArgs) {
    return this.call("update_resources", async () =>
      this.validate(
        M.ResourcesUpdate,
        await this.send("POST", `/resources/${resources_id}`, { json: namedResources(resources) }),
        "ResourcesUpdate",
      ),
    );
  }

  get_resources_by_id(resources_id: string) {
    return this.call("get_resources_by_id", async () => {
      const data = await this.send("GET", `/resources/${resources_id}`);
      return data ? this.validate(M.ResourcesUpdate, data, "ResourcesUpdate") : null;
    });
  }

  get_latest_resources() {
    return this.call("get_latest_resources", async () => {
      const data = await this.send("GET", "/resources/latest");
      return data ? this.validate(M.ResourcesUpdate, data, "ResourcesUpdate") : null;
    });
  }

  add_span(span: UpstreamSpan) {
    return this.call("add_span", async () => {
      const data = await this.send("POST", "/spans", { json: span });
      return data !== null ? this.validate(M.Span, data, "Span") : null;
    });
  }

  /** One `add_span` per span, one after another, keeping the non-null answers. */
  add_many_spans(spans: UpstreamSpan[]) {
    return this.call("add_many_spans", async () => {
      const out = [];
      for (const s of spans) {
        const r = await this.add_span(s);
        if (r !== null) out.push(r);
      }
      return out;
    });
  }

  get_next_span_sequence_id(rollout_id: string, attempt_id: string) {
    return this.call("get_next_span_sequence_id", async () => {
      const data = await this.send("POST", "/spans/next", { json: { rollout_id, attempt_id } });
      return this.validate(M.NextSequenceIdResponse, data, "NextSequenceIdResponse").sequence_id;
    });
  }

  /** One `/spans/next` per pair, one after another. */
  get_many_span_sequence_ids(pairs: readonly (readonly [string, string])[]) {
    return this.call("get_many_span_sequence_ids", async () => {
      const out: number[] = [];
      for (const [r, a] of pairs) out.push(await this.get_next_span_sequence_id(r, a));
      return out;
    });
  }

  /**
   * `add_otel_span`: the next sequence id from the server when none is given, then `add_span` of
   * `Span.from_opentelemetry(...)`, which `toSpan(sequence_id)` builds.
   */
  add_otel_span(rollout_id: string, attempt_id: string, toSpan: (sequence_id: number) => UpstreamSpan, sequence_id: number | null = null) {
    return this.call("add_otel_span", async () => {
      const seq = sequence_id ?? (await this.get_next_span_sequence_id(rollout_id, attempt_id));
      return this.add_span(toSpan(seq));
    });
  }

  wait_for_rollouts(rollout_ids: string[], timeout: number | null = null) {
    return this.call("wait_for_rollouts", async () => {
      if (timeout !== null && timeout > 0.1) throw new Error("ValueError: Timeout must be less than 0.1 seconds in LightningStoreClient");
      const json = { rollout_ids, timeout: timeout === null ? null : pyFloat(timeout) };
      return this.validate(M.Rollout.array(), await this.send("POST", "/waits/rollouts", { json }), "list[Rollout]");
    });
  }

  query_spans(
    rollout_id: string,
    attempt_id: string | null = null,
    o: {
      trace_id?: string | null;
      trace_id_contains?: string | null;
      span_id?: string | null;
      span_id_contains?: string | null;
      parent_id?: string | null;
      parent_id_contains?: string | null;
      name?: string | null;
      name_contains?: string | null;
      filter_logic?: "and" | "or";
      limit?: number;
      offset?: number;
      sort_by?: string | null;
      sort_order?: "asc" | "desc";
    } = {},
  ) {
    return this.call("query_spans", async () => {
      const json: Record<string, unknown> = { rollout_id, limit: o.limit ?? -1, offset: o.offset ?? 0 };
      if (attempt_id !== null) json.attempt_id = attempt_id;
      for (const k of [
        "trace_id",
        "trace_id_contains",
        "span_id",
        "span_id_contains",
        "parent_id",
        "parent_id_contains",
        "name",
        "name_contains",
      ] as const) {
        if (o[k] != null) json[k] = o[k];
      }
      json.filter_logic = o.filter_logic ?? "and";
      const sortBy = o.sort_by === undefined ? "sequence_id" : o.sort_by;
      if (sortBy !== null) {
        json.sort_by = sortBy;
        json.sort_order = o.sort_order ?? "asc";
      }
      return this.paginated(M.Span, await this.send("POST", "/spans/search", { json }), "PaginatedResult[Span]");
    });
  }

  update_rollout(
    rollout_id: string,
    o: {
      input?: unknown;
      mode?: string | null;
      resources_id?: string | null;
      status?: string;
      config?: RolloutConfigArgs;
      metadata?: Record<string, unknown> | null;
    },
  ) {
    return this.call("update_rollout", async () => {
      const json: Record<string, unknown> = {};
      if ("input" in o) json.input = o.input;
      if (o.mode !== undefined) json.mode = o.mode;
      if (o.resources_id !== undefined) json.resources_id = o.resources_id;
      if (o.status !== undefined) json.status = o.status;
      if (o.config !== undefined) json.config = rolloutConfig(o.config);
      if (o.metadata !== undefined) json.metadata = o.metadata;
      return this.validate(M.Rollout, await this.send("POST", `/rollouts/${rollout_id}`, { json }), "Rollout");
    });
  }

  update_attempt(
    rollout_id: string,
    attempt_id: string,
    o: { status?: string; worker_id?: string; last_heartbeat_time?: number; metadata?: Record<string, unknown> | null },
  ) {
    return this.call("update_attempt", async () => {
      const json: Record<string, unknown> = {};
      if (o.status !== undefined) json.status = o.status;
      if (o.worker_id !== undefined) json.worker_id = o.worker_id;
      if (o.last_heartbeat_time !== undefined) json.last_heartbeat_time = pyFloat(o.last_heartbeat_time);
      if (o.metadata !== undefined) json.metadata = o.metadata;
      return this.validate(M.Attempt, await this.send("POST", `/rollouts/${rollout_id}/attempts/${attempt_id}`, { json }), "Attempt");
    });
  }

  /** Upstream never sends `limit`/`offset` here (docs/departures.md#7 is about our client). */
  query_workers(
    o: {
      status_in?: string[] | null;
      worker_id_contains?: string | null;
      filter_logic?: "and" | "or";
      sort_by?: string | null;
      sort_order?: "asc" | "desc";
    } = {},
  ) {
    return this.call("query_workers", async () => {
      const json: Record<string, unknown> = {};
      if (o.status_in != null) json.status_in = o.status_in;
      if (o.worker_id_contains != null) json.worker_id_contains = o.worker_id_contains;
      json.filter_logic = o.filter_logic ?? "and";
      if (o.sort_by != null) {
        json.sort_by = o.sort_by;
        json.sort_order = o.sort_order ?? "asc";
      }
      const data = (await this.send("POST", "/workers/search", { json })) as { items?: unknown[] };
      return this.paginated(M.Worker, { ...data, items: data.items ?? [] }, "PaginatedResult[Worker]");
    });
  }

  /** The one lookup upstream does not guard: any error status raises `ClientResponseError`. */
  get_worker_by_id(worker_id: string) {
    return this.call("get_worker_by_id", async () => {
      const data = await this.send("GET", `/workers/${worker_id}`);
      return data === null ? null : this.validate(M.Worker, data, "Worker");
    });
  }

  /** `{"heartbeat_stats": ...}` when stats are given, otherwise no body at all. */
  update_worker(worker_id: string, heartbeat_stats?: Record<string, unknown>) {
    return this.call("update_worker", async () => {
      const json = heartbeat_stats === undefined ? undefined : { heartbeat_stats };
      return this.validate(M.Worker, await this.send("POST", `/workers/${worker_id}`, { json }), "Worker");
    });
  }
}
