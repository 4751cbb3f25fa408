/**
 * Anthropic's Messages API as the LLM proxy speaks it (docs/llm-proxy.md#the-anthropic-messages-api): its
 * paths, its error shape `{type: "error", error: {type, message}}` with the error types Anthropic gives each
 * status, where an upstream's Messages route is, and the headers that go to it.
 */
import type { Context } from "hono";

/** The Messages route and its token counter, bare or under the routing prefix. */
const MESSAGES_PATH = /\/v1\/messages(\/count_tokens)?\/?$/;
export const isMessagesPath = (path: string): boolean => MESSAGES_PATH.test(path);

/** Sent upstream when the caller names no API version (Anthropic's API requires one). */
export const DEFAULT_ANTHROPIC_VERSION = "2023-06-01";

const ERROR_TYPES: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  402: "billing_error",
  403: "permission_error",
  404: "not_found_error",
  413: "request_too_large",
  429: "rate_limit_error",
  500: "api_error",
  504: "timeout_error",
  529: "overloaded_error",
};
const STATUSES = new Map(Object.entries(ERROR_TYPES).map(([status, type]) => [type, Number(status)]));

/** Anthropic's error type for an HTTP status (another 4xx is `invalid_request_error`, another 5xx `api_error`). */
export function anthropicErrorType(status: number): string {
  return ERROR_TYPES[status] ?? (status < 500 ? "invalid_request_error" : "api_error");
}

/** The HTTP status Anthropic gives an error type (e.g. that of an `error` event in a stream), or null for an unknown type. */
export function anthropicErrorStatus(type: unknown): number | null {
  return typeof type === "string" ? (STATUSES.get(type) ?? null) : null;
}

export function anthropicErrorBody(status: number, message: string): { type: "error"; error: { type: string; message: string } } {
  return { type: "error", error: { type: anthropicErrorType(status), message } };
}

/** Whether an answer's text is an error in Anthropic's shape (an upstream's, passed on as it is). */
export function isAnthropicErrorBody(text: string): boolean {
  try {
    const body = JSON.parse(text) as { type?: unknown; error?: { type?: unknown; message?: unknown } | null };
    return body.type === "error" && typeof body.error?.type === "string" && typeof body.error.message === "string";
  } catch {
    return false;
  }
}

/** The SSE event that ends a stream with an error (the `@anthropic-ai/sdk` client raises it as an APIError). */
export function anthropicErrorEvent(status: number, message: string): string {
  return `event: error\ndata: ${JSON.stringify(anthropicErrorBody(status, message))}\n\n`;
}

/**
 * An upstream's URL for `path` (`/messages` or `/messages/count_tokens`). Its base URL is what an
 * Anthropic client takes as its base URL (`https://api.anthropic.com`, `ANTHROPIC_BASE_URL`), to which
 * `/v1` is added; a base that already ends in `/v1` gets none.
 */
export function anthropicUpstreamUrl(base: string, path: string, search: string): string {
  return `${base.endsWith("/v1") ? base : `${base}/v1`}${path}${search}`;
}

/**
 * The headers for an Anthropic upstream: the caller's `anthropic-version` (or the default) and
 * `anthropic-beta`; the model's key as `x-api-key`. A model without a key, on a proxy without a token, passes
 * on the caller's own credential (`x-api-key` or `Authorization`), so a client's Anthropic key still
 * works; on a proxy with a token, that credential is the proxy's token and stays here.
 */
export function anthropicUpstreamHeaders(c: Context, apiKey: string | null, proxyHasToken: boolean): Record<string, string> {
  const headers: Record<string, string> = { "anthropic-version": c.req.header("anthropic-version") ?? DEFAULT_ANTHROPIC_VERSION };
  const beta = c.req.header("anthropic-beta");
  if (beta !== undefined) headers["anthropic-beta"] = beta;
  if (apiKey !== null) headers["x-api-key"] = apiKey;
  else if (!proxyHasToken) {
    const key = c.req.header("x-api-key");
    const authorization = c.req.header("authorization");
    if (key !== undefined) headers["x-api-key"] = key;
    else if (authorization !== undefined) headers.authorization = authorization;
  }
  return headers;
}
