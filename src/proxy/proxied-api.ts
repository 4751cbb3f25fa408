/**
 * What differs between the APIs the LLM proxy forwards, OpenAI's (chat and text completions) and
 * Anthropic's Messages API: where a call goes on an upstream, the headers it takes there, the shape of the
 * proxy's own errors and of the event that ends a broken stream, and how the call becomes span attributes.
 */
import type { Context } from "hono";
import { anthropicCallAttributes, assembleMessageStream } from "../tracer/anthropic-call.ts";
import { assembleStream, type JsonObject, openAiCallAttributes } from "../tracer/gen-ai.ts";
import type { Attributes } from "../types/span.ts";
import {
  anthropicErrorBody,
  anthropicErrorEvent,
  anthropicErrorStatus,
  anthropicUpstreamHeaders,
  anthropicUpstreamUrl,
  isAnthropicErrorBody,
} from "./anthropic-http.ts";
import type { ProxyModelEntry, ResolvedModel } from "./llm-proxy-config.ts";

export type CallError = { status: number | null; message: string };

export interface ProxiedApi {
  /** The `api` of the model entries the route serves. */
  readonly api: ProxyModelEntry["api"];
  /** Whether a routed call is recorded as an LLM-call span (a token count is not). */
  readonly recorded: boolean;
  /** The call's URL on an upstream, from its base URL and the request's query (`?…`, or empty). */
  url(base: string, search: string): string;
  /** The headers for the upstream: the model's key, what passes on from the caller. */
  headers(c: Context, model: ResolvedModel, proxyHasToken: boolean): Record<string, string>;
  /** The body of an error the proxy answers itself. */
  errorBody(status: number, message: string, code: string): unknown;
  /** The body to answer for an upstream's error answer `text` when it is not in the API's shape, else null (passed on as it is). */
  upstreamErrorBody(status: number, text: string, message: string): unknown | null;
  /** The SSE event that ends a stream the upstream broke off. */
  streamErrorEvent(message: string): string;
  attributes(call: { request: JsonObject; response: JsonObject | null; error: CallError | null }): Attributes;
  /** A stream's events folded into the unstreamed answer, and an error the stream itself reported. */
  assemble(events: JsonObject[]): { response: JsonObject | null; error: CallError | null };
}

/** Where each API's calls go, for the error that sends a caller to the right route. */
export const API_ROUTES: Record<ProxyModelEntry["api"], string> = {
  openai: "POST /v1/chat/completions or /v1/completions",
  anthropic: "POST /v1/messages",
};

/** OpenAI's `/chat/completions` or `/completions`. */
export function openAiApi(path: "/chat/completions" | "/completions"): ProxiedApi {
  return {
    api: "openai",
    recorded: true,
    url: (base) => `${base}${path}`,
    headers: (_c, model): Record<string, string> => (model.apiKey === null ? {} : { authorization: `Bearer ${model.apiKey}` }),
    errorBody: (_status, message, code) => ({ error: { message, type: "upstream_error", param: null, code } }),
    upstreamErrorBody: () => null,
    streamErrorEvent: (message) =>
      `data: ${JSON.stringify({ error: { message, type: "upstream_error", param: null, code: "upstream_stream_error" } })}\n\n`,
    attributes: openAiCallAttributes,
    assemble: (events) => ({ response: events.length > 0 ? assembleStream(events) : null, error: null }),
  };
}

/** Anthropic's `/messages` (recorded) or `/messages/count_tokens` (forwarded only). */
export function anthropicApi(path: "/messages" | "/messages/count_tokens"): ProxiedApi {
  return {
    api: "anthropic",
    recorded: path === "/messages",
    url: (base, search) => anthropicUpstreamUrl(base, path, search),
    headers: (c, model, proxyHasToken) => anthropicUpstreamHeaders(c, model.apiKey, proxyHasToken),
    errorBody: (status, message) => anthropicErrorBody(status, message),
    upstreamErrorBody: (status, text, message) => (isAnthropicErrorBody(text) ? null : anthropicErrorBody(status, message)),
    streamErrorEvent: (message) => anthropicErrorEvent(500, message),
    attributes: anthropicCallAttributes,
    assemble: (events) => {
      const { message, error } = assembleMessageStream(events);
      const reported =
        error === null
          ? null
          : {
              status: anthropicErrorStatus(error.type) ?? 500,
              message: `the upstream stream reported ${String(error.type)}: ${String(error.message)}`,
            };
      return { response: message, error: reported };
    },
  };
}
