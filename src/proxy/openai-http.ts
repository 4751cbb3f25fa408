/**
 * What the policy server and the LLM proxy share as OpenAI-compatible HTTP servers: the routing prefix
 * (`/rollout/{rid}/attempt/{aid}`), the OpenAI error body, bearer authentication and the store server's
 * guard against web pages (src/server/browser-guard.ts), the 404 body, how a
 * fetch handler is served, and the resource (LLM or ProxyLLM) that points at the server.
 */
import type { Context, Hono } from "hono";
import { serveFetch } from "../platform/index.ts";
import { silentLogger } from "../platform/log.ts";
import { bearerAuth } from "../server/auth.ts";
import { browserGuard } from "../server/browser-guard.ts";
import { DEFAULT_BODY_LIMIT } from "../server/body-limit.ts";
import { drainRefusedBodies } from "../server/drain-refused.ts";
import { LightningError, ValidationError } from "../types/errors.ts";
import { type LLM, type ProxyLLM, proxyBaseUrl } from "../types/resources.ts";
import { AGENT_NAME_HEADER } from "../types/semconv.ts";
import { checkAgentName } from "../tracer/agent-scope.ts";
import { anthropicErrorBody } from "./anthropic-http.ts";

/** Every route exists bare and under upstream's routing prefix, whose ids are the `rid`/`aid` params. */
export const ROUTE_PREFIXES = ["", "/rollout/:rid/attempt/:aid"] as const;

/** The rollout and attempt of a request under the routing prefix, or null for a bare route. */
export function routedAttempt(c: Context): { rolloutId: string; attemptId: string } | null {
  const rolloutId = c.req.param("rid");
  const attemptId = c.req.param("aid");
  return rolloutId !== undefined && attemptId !== undefined ? { rolloutId, attemptId } : null;
}

/** The agent the request names in its `x-agent-name` header, or null; a bad name is a 400 naming the header. */
export function requestAgentName(c: Context): string | null {
  const name = c.req.header(AGENT_NAME_HEADER);
  return name === undefined ? null : checkAgentName(name, [AGENT_NAME_HEADER]);
}

/** An error in the OpenAI shape: `{ error: { message, type, param, code } }`. */
export class OpenAiError extends LightningError {
  constructor(
    override readonly status: number,
    readonly type: string,
    message: string,
    readonly code: string | null = null,
  ) {
    super(message);
  }
}

/** The HTTP status and OpenAI error body of an error thrown by a handler. */
export function errorBody(err: unknown): { status: number; body: unknown } {
  if (err instanceof OpenAiError)
    return { status: err.status, body: { error: { message: err.message, type: err.type, param: null, code: err.code } } };
  if (err instanceof ValidationError) {
    const param = err.issues[0]?.path.join(".") ?? null;
    return { status: 400, body: { error: { message: err.message, type: "invalid_request_error", param, code: null } } };
  }
  if (err instanceof LightningError)
    return { status: err.status, body: { error: { message: err.message, type: err.errorType, param: null, code: null } } };
  return {
    status: 500,
    body: { error: { message: err instanceof Error ? err.message : String(err), type: "server_error", param: null, code: null } },
  };
}

/** The headers of a server-sent event stream that proxies must not buffer. */
export const SSE_HEADERS = {
  "content-type": "text/event-stream",
  "cache-control": "no-cache",
  connection: "keep-alive",
  "x-accel-buffering": "no",
} as const;

/** Who may call an OpenAI-compatible server: its token, and for the `Host` check its address and allowed names. */
export interface OpenAiAccess {
  /** When set, every route but `/health` needs `Authorization: Bearer <token>` (401 otherwise). */
  token?: string | null;
  /** The address the server listens on. Default 127.0.0.1. */
  bindAddress?: string;
  /** `Host` names answered besides localhost, IP addresses and the bind address (`--allowed-host`; src/server/browser-guard.ts). */
  allowedHosts?: readonly string[];
  /** Paths of Anthropic's API: their errors take Anthropic's shape, and the token may come as `x-api-key` there. */
  anthropicPath?: (path: string) => boolean;
}

/** The status and body of an error in the shape the request's API uses. */
function errorBodyFor(err: unknown, anthropic: boolean): { status: number; body: unknown } {
  const openAi = errorBody(err);
  if (!anthropic) return openAi;
  const message = (openAi.body as { error: { message: string } }).error.message;
  return { status: openAi.status, body: anthropicErrorBody(openAi.status, message) };
}

/**
 * OpenAI error bodies for thrown errors and unknown routes (Anthropic's on `anthropicPath`s); without a
 * token, the `Host` check and the refusal of cross-site writes (src/server/browser-guard.ts); with a
 * token, `Authorization: Bearer <token>` (or, on `anthropicPath`s, `x-api-key: <token>`) required on
 * every route but `/health` (401 otherwise).
 */
export function installOpenAiBasics(app: Hono, access: OpenAiAccess): void {
  const token = access.token ?? null;
  const anthropic = (c: Context) => access.anthropicPath?.(c.req.path) === true;
  app.onError((err, c) => {
    const { status, body } = errorBodyFor(err, anthropic(c));
    return c.json(body, status as 400);
  });
  app.notFound((c) =>
    c.json(
      { error: { message: `No route for ${c.req.method} ${c.req.path}`, type: "invalid_request_error", param: null, code: "not_found" } },
      404,
    ),
  );
  app.use("*", drainRefusedBodies(DEFAULT_BODY_LIMIT, silentLogger));
  const guard = browserGuard({ token, bindAddress: access.bindAddress, allowedHosts: access.allowedHosts });
  if (guard) app.use("*", guard);
  if (token === null) return;
  app.use(
    "*",
    bearerAuth({
      token,
      isPublic: (c) => c.req.path.endsWith("/health"),
      refusal: (message, c) => errorBodyFor(new OpenAiError(401, "authentication_error", message, "invalid_api_key"), anthropic(c)).body,
      keyHeader: access.anthropicPath ? { name: "x-api-key", on: anthropic } : undefined,
    }),
  );
}

/** How to serve a fetch handler (runtimes/*.ts have one per runtime; Node's is the default). */
export type ServeFn = (
  fetch: (req: Request) => Response | Promise<Response>,
  at: { hostname: string; port: number },
) => Promise<{ port: number; stop(): Promise<void> }>;

type NodeServer = {
  close(cb: (e?: Error) => void): void;
  closeIdleConnections(): void;
};

/**
 * Closes a Node server once its requests are answered. `close()` closes the connections idle at that
 * moment only; one whose answer is still being written would then sit in keep-alive for minutes, so
 * idle connections are closed again until the server is closed.
 */
function closeServer(server: NodeServer): Promise<void> {
  return new Promise<void>((done, fail) => {
    const sweep = setInterval(() => server.closeIdleConnections(), 20);
    server.close((e) => {
      clearInterval(sweep);
      if (e) fail(e);
      else done();
    });
  });
}

/** Imported through a variable, so a browser bundle (where the policy app is answered in-process) leaves it out. */
const NODE_SERVER = "@hono/node-server";

/** Node's server through @hono/node-server, with long keep-alive. */
export async function nodeServe(): Promise<ServeFn> {
  const { serve } = (await import(/* @vite-ignore */ NODE_SERVER)) as typeof import("@hono/node-server");
  return (fetch, { hostname, port }) =>
    new Promise((resolve, reject) => {
      const server = serve({ fetch, hostname, port }, (info) =>
        resolve({ port: info.port, stop: () => closeServer(server as unknown as NodeServer) }),
      );
      server.once("error", reject);
      // Agents reuse pooled connections across training steps; a step can block the event loop for
      // longer than Node's 5 s keep-alive, and a socket the server closes just as a client reuses it
      // fails that request (ECONNRESET). Idle connections therefore stay open for 10 minutes.
      (server as { keepAliveTimeout?: number }).keepAliveTimeout = 600_000;
    });
}

/** The platform's server (Node, Deno, Bun) in the ServeFn shape: what the `agl` commands use. */
export const platformServe: ServeFn = async (fetch, at) => {
  // Its clients are the agents of a training run, usually many on one host (one address), each call
  // held for a whole generation: no per-address limit; the cap's rule for slow clients still holds.
  const served = await serveFetch(fetch, { hostname: at.hostname, port: at.port, limits: { maxConnectionsPerAddress: 0 } });
  return { port: served.port, stop: () => served.stop(true) };
};

/** `http://host:port/v1`, brackets around an IPv6 host. */
export function v1Endpoint(hostname: string, port: number): string {
  return `http://${hostname.includes(":") ? `[${hostname}]` : hostname}:${port}/v1`;
}

export interface ResourceOptions {
  samplingParameters?: Record<string, unknown>;
  rolloutId?: string;
  attemptId?: string;
}

/** The server as a resource: a ProxyLLM (runners bind it to their attempt), or an LLM bound to one attempt. */
export function llmResource(endpoint: string, model: string, options: ResourceOptions): ProxyLLM | LLM {
  const base = { endpoint, model, api_key: null, sampling_parameters: options.samplingParameters ?? {} };
  if (options.rolloutId === undefined && options.attemptId === undefined) return { resource_type: "proxy_llm", ...base };
  if (options.rolloutId === undefined || options.attemptId === undefined)
    throw new ValidationError("rolloutId and attemptId must be given together", ["rolloutId"]);
  return { resource_type: "llm", ...base, endpoint: proxyBaseUrl(endpoint, options.rolloutId, options.attemptId) };
}
