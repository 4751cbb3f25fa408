/**
 * The LLM proxy (docs/llm-proxy.md): an OpenAI-compatible server in front of a list of models, each
 * served by one or more OpenAI-compatible upstreams (vLLM, SGLang, `agl serve`, a hosted API), or by
 * upstreams of Anthropic's Messages API (`POST /v1/messages`; proxied-api.ts holds what differs). A call
 * under upstream's routing prefix `/rollout/{rid}/attempt/{aid}/v1/…` gets a sequence id when it arrives
 * and is stored as one LLM-call span named `litellm_request` (gen-ai.ts attributes, token ids included
 * when the backend returns them), so the adapters read it as they read upstream's LiteLLM proxy spans.
 * Streams are passed through event by event while a copy is assembled for the span. A request's
 * `x-agent-name` (the calling agent) is recorded as `gen_ai.agent.name` and passed on to the upstream.
 */
import { type Context, Hono } from "hono";
import { z } from "zod";
import { platform } from "../platform/index.ts";
import { getLogger } from "../platform/log.ts";
import type { LightningStore } from "../store/base.ts";
import type { JsonObject } from "../tracer/gen-ai.ts";
import { type Clock, systemClock } from "../types/clock.ts";
import { ValidationError } from "../types/errors.ts";
import type { LLM, ProxyLLM } from "../types/resources.ts";
import { type Attributes, spanFromAttributes } from "../types/span.ts";
import { AGENT_NAME_HEADER, GEN_AI_AGENT_NAME } from "../types/semconv.ts";
import { type ProxyModelEntryInput, parseProxyModelList, type ResolvedModel, resolveModels } from "./llm-proxy-config.ts";
import { LLM_CALL_SPAN_NAME } from "./llm-span.ts";
import { isMessagesPath } from "./anthropic-http.ts";
import { API_ROUTES, anthropicApi, type CallError, openAiApi, type ProxiedApi } from "./proxied-api.ts";
import {
  installOpenAiBasics,
  llmResource,
  nodeServe,
  OpenAiError,
  type ResourceOptions,
  ROUTE_PREFIXES,
  requestAgentName,
  routedAttempt,
  type ServeFn,
  SSE_HEADERS,
  v1Endpoint,
} from "./openai-http.ts";
import { readJsonBody } from "../server/json-body.ts";
import { relaySse } from "./sse-relay.ts";
import { callUpstream, exponentialBackoff, type RetryDelay, UpstreamTimeoutError, UpstreamUnavailableError } from "./upstream-call.ts";

const log = getLogger("agentlightning.llm_proxy");

/** Lightning TS attributes the proxy adds to its spans. */
export const PROXY_ATTRIBUTES = {
  /** The model name the client asked for (the entry's name). */
  model: "lightning.proxy.model",
  /** The upstream base URL that gave the answer (the last one tried). */
  upstream: "lightning.proxy.upstream",
  /** How many attempts the call took (1 without retries). */
  attempts: "lightning.proxy.attempts",
  /** Seconds from the request's arrival to the end of its answer. */
  latency: "lightning.proxy.latency_s",
  /** Whether the answer was streamed to the caller. */
  stream: "lightning.proxy.stream",
} as const;

export interface LLMProxyOptions {
  models: ProxyModelEntryInput[];
  hostname?: string;
  /** 0 (the default) picks a free port. */
  port?: number;
  /** When set, every route but `/health` needs `Authorization: Bearer <token>`. */
  token?: string | null;
  /** `Host` names answered besides localhost, IP addresses and `hostname` (`--allowed-host`; src/server/browser-guard.ts). */
  allowedHosts?: readonly string[];
  /** Where routed calls are recorded; without it nothing is recorded. */
  store?: LightningStore | null;
  clock?: Clock;
  serve?: ServeFn;
  /** Reads the API-key variables the models name (this process's environment by default). */
  env?: (name: string) => string | undefined;
  /** The fetch that reaches upstreams (the runtime's by default). */
  fetch?: typeof fetch;
  /**
   * The fetch for non-streamed calls, whose answers are read whole (default: `fetch`). `agl proxy` gives
   * undici's pools on Node (trainer/runner-fetch.ts), which cost less CPU per call than the global fetch.
   */
  fetchWhole?: typeof fetch;
  /** Backoff between attempts (exponentialBackoff() by default; tests give a fixed one). */
  retryDelay?: RetryDelay;
}

/** The part of a request body the proxy reads; everything else goes upstream untouched. */
const ProxiedRequest = z.looseObject({ model: z.string().min(1), stream: z.boolean().nullish() });

/** An upstream's error message: its `error.message` (OpenAI's and Anthropic's shape), else its body as text. */
function upstreamErrorMessage(status: number, text: string): string {
  try {
    const parsed = JSON.parse(text) as { error?: { message?: unknown } | string };
    const m = typeof parsed.error === "string" ? parsed.error : parsed.error?.message;
    if (typeof m === "string" && m !== "") return `upstream answered ${status}: ${m}`;
  } catch {
    // not JSON: the text itself
  }
  return `upstream answered ${status}${text.trim() ? `: ${text.trim().slice(0, 500)}` : ""}`;
}

/**
 * Aborted when either is (with its reason); `release` removes the listeners, which would otherwise pile
 * up on the proxy's long-lived signal. (A plain controller: AbortSignal.any is not on every runtime.)
 */
function eitherSignal(x: AbortSignal, y: AbortSignal): { signal: AbortSignal; release(): void } {
  const c = new AbortController();
  const onX = () => c.abort(x.reason);
  const onY = () => c.abort(y.reason);
  if (x.aborted) onX();
  else if (y.aborted) onY();
  x.addEventListener("abort", onX, { once: true });
  y.addEventListener("abort", onY, { once: true });
  return {
    signal: c.signal,
    release: () => {
      x.removeEventListener("abort", onX);
      y.removeEventListener("abort", onY);
    },
  };
}

interface CallRecord {
  api: ProxiedApi;
  routed: { rolloutId: string; attemptId: string };
  sequenceId: number;
  model: string;
  agentName: string | null;
  request: JsonObject;
  response: JsonObject | null;
  error: CallError | null;
  upstream: string | null;
  attempts: number;
  stream: boolean;
  startTime: number;
}

export class LLMProxy {
  private handle: { port: number; stop(): Promise<void> } | null = null;
  private models = new Map<string, ResolvedModel>();
  private readonly turns = new Map<string, number>();
  private store: LightningStore | null;
  /** Cancels upstream calls in flight when the proxy stops. */
  private stopping = new AbortController();
  /** Requests (and streams) not yet finished, span writes included. */
  private readonly inFlight = new Set<Promise<unknown>>();
  private readonly clock: Clock;
  private readonly env: (name: string) => string | undefined;
  private readonly retryDelay: RetryDelay;

  constructor(private readonly options: LLMProxyOptions) {
    this.store = options.store ?? null;
    this.clock = options.clock ?? systemClock;
    this.env = options.env ?? ((n) => platform.env(n));
    this.retryDelay = options.retryDelay ?? exponentialBackoff();
    this.updateModelList(options.models);
  }

  /** Replaces the models (validated; API keys read now); the next request uses the new list. */
  updateModelList(models: ProxyModelEntryInput[]): void {
    const resolved = resolveModels(parseProxyModelList(models), this.env);
    this.models = new Map(resolved.map((m) => [m.name, m]));
  }

  /** The models served, by name. */
  get modelNames(): string[] {
    return [...this.models.keys()];
  }

  /** Where the next routed calls are recorded (takes effect for the next request). */
  setStore(store: LightningStore | null): void {
    this.store = store;
  }

  isRunning(): boolean {
    return this.handle !== null;
  }

  async start(): Promise<void> {
    if (this.handle) return;
    this.stopping = new AbortController();
    const serve = this.options.serve ?? (await nodeServe());
    this.handle = await serve(this.app().fetch, { hostname: this.options.hostname ?? "127.0.0.1", port: this.options.port ?? 0 });
  }

  /** Stops: upstream calls in flight are cancelled (their callers get an error), their spans written, then the port is closed. */
  async stop(): Promise<void> {
    const h = this.handle;
    if (!h) return;
    this.stopping.abort(new OpenAiError(503, "server_error", "the LLM proxy is stopping", "proxy_stopping"));
    await Promise.allSettled([...this.inFlight]);
    this.handle = null;
    await h.stop();
  }

  /** `http://host:port/v1` (throws before start). */
  get endpoint(): string {
    if (!this.handle) throw new ValidationError("the LLM proxy is not running", []);
    return v1Endpoint(this.options.hostname ?? "127.0.0.1", this.handle.port);
  }

  /** The proxy as a resource: a ProxyLLM, or an LLM bound to one attempt. `model` defaults to the only model. */
  asResource(options: ResourceOptions & { model?: string } = {}): ProxyLLM | LLM {
    let model = options.model;
    if (model === undefined) {
      if (this.models.size !== 1)
        throw new ValidationError(`the proxy serves ${this.models.size} models (${this.modelNames.join(", ")}); name one`, ["model"]);
      model = this.modelNames[0]!;
    } else if (!this.models.has(model))
      throw new ValidationError(`the proxy does not serve '${model}' (it serves ${this.modelNames.join(", ")})`, ["model"]);
    return llmResource(this.endpoint, model, options);
  }

  /** The Hono app (exposed for in-process use and tests). */
  app(): Hono {
    const app = new Hono();
    installOpenAiBasics(app, {
      token: this.options.token,
      bindAddress: this.options.hostname ?? "127.0.0.1",
      allowedHosts: this.options.allowedHosts,
      anthropicPath: isMessagesPath,
    });
    for (const prefix of ROUTE_PREFIXES) {
      app.get(`${prefix}/health`, (c) => c.json({ status: "ok" }));
      app.get(`${prefix}/v1/models`, (c) =>
        c.json({
          object: "list",
          data: this.modelNames.map((id) => ({ id, object: "model", created: 0, owned_by: "lightning-ts-proxy" })),
        }),
      );
      app.post(`${prefix}/v1/chat/completions`, (c) => this.track(this.forward(c, openAiApi("/chat/completions"))));
      app.post(`${prefix}/v1/completions`, (c) => this.track(this.forward(c, openAiApi("/completions"))));
      app.post(`${prefix}/v1/messages`, (c) => this.track(this.forward(c, anthropicApi("/messages"))));
      app.post(`${prefix}/v1/messages/count_tokens`, (c) => this.track(this.forward(c, anthropicApi("/messages/count_tokens"))));
    }
    return app;
  }

  private track<T>(p: Promise<T>): Promise<T> {
    this.inFlight.add(p);
    void p.then(
      () => this.inFlight.delete(p),
      () => this.inFlight.delete(p),
    );
    return p;
  }

  /** The next upstream of a model, in turn across all requests. */
  private pickUpstream(model: ResolvedModel): () => string {
    return () => {
      const turn = this.turns.get(model.name) ?? 0;
      this.turns.set(model.name, turn + 1);
      return model.upstreams[turn % model.upstreams.length]!;
    };
  }

  private async forward(c: Context, api: ProxiedApi): Promise<Response> {
    const startTime = this.clock.now();
    const routed = routedAttempt(c);
    const agentName = requestAgentName(c);
    const raw = await readJsonBody(c, false);
    const parsed = ProxiedRequest.safeParse(raw);
    if (!parsed.success) throw ValidationError.fromZod(parsed.error, "request");
    const model = this.models.get(parsed.data.model);
    if (model === undefined)
      throw new OpenAiError(
        404,
        "invalid_request_error",
        `The model '${parsed.data.model}' does not exist; this proxy serves ${this.modelNames.map((n) => `'${n}'`).join(", ")}`,
        "model_not_found",
      );
    if (model.api !== api.api)
      throw new OpenAiError(
        400,
        "invalid_request_error",
        `The model '${model.name}' is served over the ${model.api === "anthropic" ? "Anthropic Messages" : "OpenAI"} API: call ${API_ROUTES[model.api]}`,
        "wrong_api",
      );
    const store = api.recorded ? this.store : null;
    // One sequence id per request, taken when it arrives (upstream's RolloutAttemptMiddleware).
    const sequenceId = routed !== null && store !== null ? await store.getNextSpanSequenceId(routed.rolloutId, routed.attemptId) : null;
    const upstreamName = typeof model.params.model === "string" ? model.params.model : model.name;
    const request: JsonObject = { ...(raw as JsonObject), ...model.params, model: upstreamName };
    const stream = request.stream === true;
    const record = (r: Omit<CallRecord, "api" | "routed" | "sequenceId" | "model" | "agentName" | "request" | "stream" | "startTime">) =>
      routed !== null && sequenceId !== null && store !== null
        ? this.recordSpan(store, { api, routed, sequenceId, model: model.name, agentName, request, stream, startTime, ...r })
        : Promise.resolve();
    const headers = api.headers(c, model, (this.options.token ?? null) !== null);
    if (agentName !== null) headers[AGENT_NAME_HEADER] = agentName;
    const search = new URL(c.req.url).search;

    // Gone callers and a stopping proxy both cancel the upstream call.
    const cancel = eitherSignal(this.stopping.signal, c.req.raw.signal);
    let streaming = false;
    try {
      let answer: Awaited<ReturnType<typeof callUpstream>>;
      try {
        answer = await callUpstream({
          model,
          url: (base) => api.url(base, search),
          body: JSON.stringify(request),
          headers,
          pickUpstream: this.pickUpstream(model),
          signal: cancel.signal,
          stream,
          retryDelay: this.retryDelay,
          fetch: this.options.fetch ?? fetch,
          fetchWhole: this.options.fetchWhole ?? this.options.fetch ?? fetch,
        });
      } catch (e) {
        const status = e instanceof UpstreamUnavailableError ? e.status : e instanceof OpenAiError ? e.status : null;
        const message = e instanceof Error ? e.message : String(e);
        await record({
          response: null,
          error: { status, message },
          upstream: e instanceof UpstreamUnavailableError ? e.upstream : null,
          attempts: e instanceof UpstreamUnavailableError ? e.attempts : 0,
        });
        if (e instanceof UpstreamUnavailableError)
          return c.json(api.errorBody(e.status, message, e.status === 504 ? "upstream_timeout" : "upstream_unreachable"), e.status);
        throw e;
      }
      const { response, upstream, attempts } = answer;
      const contentType = response.headers.get("content-type") ?? "application/json";

      if (answer.text !== null) {
        // A whole answer (or an error the caller gets as the upstream gave it, in its API's shape).
        let body: JsonObject | null = null;
        let error: CallError | null = null;
        if (response.ok) {
          try {
            body = JSON.parse(answer.text) as JsonObject;
          } catch {
            error = { status: 502, message: "the upstream's answer is not JSON" };
          }
        } else error = { status: response.status, message: upstreamErrorMessage(response.status, answer.text) };
        await record({ response: body, error, upstream, attempts });
        if (error?.status === 502 && response.ok)
          return c.json(api.errorBody(502, `${error.message} (${upstream})`, "upstream_bad_response"), 502);
        const reshaped = error === null ? null : api.upstreamErrorBody(error.status!, answer.text, error.message);
        if (reshaped !== null) return c.json(reshaped, response.status as 400);
        return new Response(answer.text, { status: response.status, headers: { "content-type": contentType } });
      }

      // A stream: relayed event by event; the span is written once it ends.
      if (response.body === null) {
        answer.done();
        await record({ response: null, error: { status: 502, message: "the upstream's stream has no body" }, upstream, attempts });
        return c.json(api.errorBody(502, "the upstream's stream has no body", "upstream_bad_response"), 502);
      }
      const relay = relaySse(response.body, {
        onData: answer.touch,
        errorEvent: api.streamErrorEvent,
        describeFailure: (err) =>
          answer.signal.reason instanceof UpstreamTimeoutError || answer.signal.reason instanceof OpenAiError
            ? (answer.signal.reason as Error).message
            : err instanceof Error
              ? err.message
              : String(err),
      });
      this.track(
        relay.outcome.then(async (o) => {
          answer.done();
          cancel.release();
          const assembled = api.assemble(o.chunks);
          try {
            await record({ response: assembled.response, error: o.error ?? assembled.error, upstream, attempts });
          } catch (e) {
            // The caller has its answer already; the failed write must still be seen.
            log.error(`could not store the span of a streamed call: ${e instanceof Error ? e.message : String(e)}`);
          }
        }),
      );
      streaming = true;
      return new Response(relay.body, { status: response.status, headers: { ...SSE_HEADERS, "content-type": contentType } });
    } finally {
      if (!streaming) cancel.release();
    }
  }

  private async recordSpan(store: LightningStore, r: CallRecord): Promise<void> {
    const endTime = this.clock.now();
    const attributes: Attributes = {
      ...r.api.attributes({ request: r.request, response: r.response, error: r.error }),
      [PROXY_ATTRIBUTES.model]: r.model,
      [PROXY_ATTRIBUTES.attempts]: r.attempts,
      [PROXY_ATTRIBUTES.latency]: endTime - r.startTime,
      [PROXY_ATTRIBUTES.stream]: r.stream,
    };
    if (r.upstream !== null) attributes[PROXY_ATTRIBUTES.upstream] = r.upstream;
    if (r.agentName !== null) attributes[GEN_AI_AGENT_NAME] = r.agentName;
    await store.addSpan(
      spanFromAttributes({
        rollout_id: r.routed.rolloutId,
        attempt_id: r.routed.attemptId,
        sequence_id: r.sequenceId,
        name: LLM_CALL_SPAN_NAME,
        start_time: r.startTime,
        end_time: endTime,
        attributes,
        status: r.error ? { status_code: "ERROR", description: r.error.message } : { status_code: "OK", description: null },
      }),
    );
  }
}
