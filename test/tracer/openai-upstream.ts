/**
 * A scripted OpenAI-compatible upstream for the traced-client tests (and their cross-runtime script): the
 * model name picks the answer. `script-text` answers "Hello there" (with vLLM-style token ids only when the
 * body asks `return_token_ids: true`), `script-tools` calls a `get_weather` tool, `script-error` is refused
 * with a 400, `script-broken` streams one chunk and then an error event. Streams split the answer into chunks
 * as vLLM does. Request bodies are kept in `bodies`.
 */
import { Hono } from "hono";
import { streamSSE } from "hono/streaming";
import { serveFetch } from "../../src/platform/index.ts";

type Json = Record<string, unknown>;

export const PROMPT_IDS = [11, 12, 13];
export const TEXT_PIECES = ["Hello", " there"];
export const TEXT_IDS = [[21], [22, 23]];
export const TOOL_CALL = { id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' };

function choiceFor(model: string, ids: boolean): { message: Json; finish: string; tokenIds: number[] } {
  if (model === "script-tools") {
    return {
      message: {
        role: "assistant",
        content: null,
        tool_calls: [{ id: TOOL_CALL.id, type: "function", function: { name: TOOL_CALL.name, arguments: TOOL_CALL.arguments } }],
      },
      finish: "tool_calls",
      tokenIds: ids ? [31, 32] : [],
    };
  }
  return { message: { role: "assistant", content: TEXT_PIECES.join("") }, finish: "stop", tokenIds: ids ? TEXT_IDS.flat() : [] };
}

/** Stream chunks: text in pieces, or the tool call's name first and its arguments in two halves. */
function chunksFor(model: string, ids: boolean, base: Json): Json[] {
  const chunk = (delta: Json, tokenIds: number[], finish: string | null = null): Json => ({
    ...base,
    object: "chat.completion.chunk",
    choices: [{ index: 0, delta, finish_reason: finish, ...(ids ? { token_ids: tokenIds } : {}) }],
  });
  const out: Json[] = [];
  if (model === "script-tools") {
    const half = TOOL_CALL.arguments.length >> 1;
    out.push(
      chunk(
        {
          role: "assistant",
          tool_calls: [{ index: 0, id: TOOL_CALL.id, type: "function", function: { name: TOOL_CALL.name, arguments: "" } }],
        },
        [31],
      ),
      chunk({ tool_calls: [{ index: 0, function: { arguments: TOOL_CALL.arguments.slice(0, half) } }] }, [32]),
      chunk({ tool_calls: [{ index: 0, function: { arguments: TOOL_CALL.arguments.slice(half) } }] }, [], "tool_calls"),
    );
  } else {
    TEXT_PIECES.forEach((piece, i) =>
      out.push(
        chunk(
          i === 0 ? { role: "assistant", content: piece } : { content: piece },
          TEXT_IDS[i]!,
          i === TEXT_PIECES.length - 1 ? "stop" : null,
        ),
      ),
    );
  }
  if (ids) out[0] = { ...out[0], prompt_token_ids: PROMPT_IDS };
  return out;
}

export function scriptedUpstreamApp(bodies: Json[] = []): Hono {
  const app = new Hono();
  app.post("/v1/chat/completions", async (c) => {
    const body = (await c.req.json()) as Json;
    bodies.push(body);
    const model = String(body.model);
    if (model === "script-error") {
      return c.json(
        { error: { message: "The model script-error does not exist", type: "invalid_request_error", code: "model_not_found" } },
        400,
      );
    }
    const ids = body.return_token_ids === true;
    const base = { id: `chatcmpl-${bodies.length}`, created: 1, model };
    const { message, finish, tokenIds } = choiceFor(model, ids);
    const completionTokens = model === "script-tools" ? 2 : TEXT_IDS.flat().length;
    const usage = {
      prompt_tokens: PROMPT_IDS.length,
      completion_tokens: completionTokens,
      total_tokens: PROMPT_IDS.length + completionTokens,
    };
    if (body.stream !== true) {
      return c.json({
        ...base,
        object: "chat.completion",
        choices: [{ index: 0, message, finish_reason: finish, ...(ids ? { token_ids: tokenIds } : {}) }],
        usage,
        ...(ids ? { prompt_token_ids: PROMPT_IDS } : {}),
      });
    }
    // A stream that breaks after its first chunk: the error event the SDK turns into an APIError.
    const chunks =
      model === "script-broken"
        ? [chunksFor("script-text", ids, base)[0]!, { error: { message: "the upstream died" } }]
        : chunksFor(model, ids, base);
    if ((body.stream_options as Json | undefined)?.include_usage === true)
      chunks.push({ ...base, object: "chat.completion.chunk", choices: [], usage });
    return streamSSE(c, async (s) => {
      for (const chunk of chunks) await s.writeSSE({ data: JSON.stringify(chunk) });
      await s.writeSSE({ data: "[DONE]" });
    });
  });
  return app;
}

/** Serves the scripted upstream on a free loopback port; `baseURL` ends in /v1. */
export async function serveScriptedUpstream(): Promise<{ baseURL: string; bodies: Json[]; stop(): Promise<void> }> {
  const bodies: Json[] = [];
  const served = await serveFetch(scriptedUpstreamApp(bodies).fetch, { hostname: "127.0.0.1", port: 0 });
  return { baseURL: `http://127.0.0.1:${served.port}/v1`, bodies, stop: () => served.stop() };
}
