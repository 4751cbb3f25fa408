/**
 * The LLM proxy's Anthropic Messages route (`POST /v1/messages`) through the official `@anthropic-ai/sdk`
 * client, in front of scripted Anthropic upstreams: whole and streamed answers, a tool-use round trip,
 * upstream and proxy errors in Anthropic's shape, the headers that go upstream, and the spans that
 * TraceToMessages reads back.
 */
import Anthropic, { APIError } from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { TraceToMessages } from "../../src/adapter/index.ts";
import { LLM_CALL_SPAN_NAME, type LLMProxy, PROXY_ATTRIBUTES } from "../../src/proxy/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { proxyHarness } from "./proxy-harness.ts";
import { chatAnswer, type ScriptedUpstream, startScriptedUpstream } from "./scripted-upstream.ts";

const store = new InMemoryLightningStore();
/** `a` is configured as an Anthropic client's base URL (no `/v1`), `b` with `/v1`. */
let a: ScriptedUpstream;
let b: ScriptedUpstream;
let aBase: string;

const weather = {
  name: "weather",
  description: "the weather in a city",
  input_schema: { type: "object" as const, properties: { city: { type: "string" } }, required: ["city"] },
};

const message = (content: unknown[], extra: Record<string, unknown> = {}) => ({
  id: `msg_${Math.random().toString(36).slice(2)}`,
  type: "message",
  role: "assistant",
  model: "claude-served",
  content,
  stop_reason: "end_turn",
  stop_sequence: null,
  usage: { input_tokens: 12, output_tokens: 4 },
  ...extra,
});

/** The events of a streamed answer: its blocks (text, or tool_use with its input in two JSON pieces), then the stop reason. */
function streamed(id: string, blocks: ({ text: string } | { tool: { id: string; name: string; input: object } })[], stopReason: string) {
  const events: Record<string, unknown>[] = [
    {
      type: "message_start",
      message: {
        id,
        type: "message",
        role: "assistant",
        model: "claude-served",
        content: [],
        stop_reason: null,
        usage: { input_tokens: 30, output_tokens: 1 },
      },
    },
    { type: "ping" },
  ];
  blocks.forEach((block, index) => {
    if ("text" in block) {
      events.push({ type: "content_block_start", index, content_block: { type: "text", text: "" } });
      for (const piece of block.text.match(/.{1,4}/g) ?? [])
        events.push({ type: "content_block_delta", index, delta: { type: "text_delta", text: piece } });
    } else {
      const json = JSON.stringify(block.tool.input);
      const half = Math.floor(json.length / 2);
      events.push({
        type: "content_block_start",
        index,
        content_block: { type: "tool_use", id: block.tool.id, name: block.tool.name, input: {} },
      });
      events.push({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: json.slice(0, half) } });
      events.push({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: json.slice(half) } });
    }
    events.push({ type: "content_block_stop", index });
  });
  events.push({ type: "message_delta", delta: { stop_reason: stopReason, stop_sequence: null }, usage: { output_tokens: 17 } });
  events.push({ type: "message_stop" });
  return events;
}

beforeAll(async () => {
  a = await startScriptedUpstream({ kind: "json", body: message([{ type: "text", text: "ok" }]) });
  b = await startScriptedUpstream({ kind: "json", body: message([{ type: "text", text: "ok" }]) });
  aBase = a.url.replace(/\/v1$/, "");
});
afterAll(async () => {
  await Promise.all([a.stop(), b.stop()]);
});
const { startProxy, attempt, spansOf, reset } = proxyHarness(
  store,
  () => [a, b],
  () => ({
    models: [
      {
        name: "claude",
        api: "anthropic",
        upstreams: [aBase],
        api_key_env: "UPSTREAM_KEY",
        params: { model: "claude-served" },
        max_retries: 0,
      },
      { name: "claude-keyless", api: "anthropic", upstreams: [b.url], max_retries: 0 },
      { name: "claude-nowhere", api: "anthropic", upstreams: ["http://127.0.0.1:1"], max_retries: 0 },
      { name: "gpt", upstreams: [a.url], max_retries: 0 },
    ],
    env: (name) => (name === "UPSTREAM_KEY" ? "sk-upstream" : undefined),
    retryDelay: () => 0,
  }),
);
afterEach(reset);

/** How a client authenticates: the SDK's `apiKey` (sent as `Authorization: Bearer`), or `x-api-key` as Claude Code and older SDKs send it. */
type Credential = { apiKey: string } | { xApiKey: string };

/** An Anthropic client of the proxy; its base URL is the resource's endpoint without `/v1` (the client adds `/v1/messages`). */
function client(
  proxy: LLMProxy,
  ids?: { rid: string; aid: string },
  credential: Credential = { apiKey: "client-key" },
  fetchFn?: typeof fetch,
) {
  const llm = ids ? proxy.asResource({ rolloutId: ids.rid, attemptId: ids.aid, model: "claude" }) : proxy.asResource({ model: "claude" });
  const auth =
    "apiKey" in credential ? { apiKey: credential.apiKey } : { apiKey: null, defaultHeaders: { "X-Api-Key": credential.xApiKey } };
  return new Anthropic({ baseURL: llm.endpoint.replace(/\/v1$/, ""), authToken: null, maxRetries: 0, fetch: fetchFn, ...auth });
}

/** The error the client raised for `call`. */
async function failure(call: Promise<unknown>): Promise<APIError> {
  const e = await call.then(
    () => null,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(APIError);
  return e as APIError;
}

/** A streamed call of `claude` through the proxy, recorded under `ids`. */
const streamCall = (proxy: LLMProxy, ids: { rid: string; aid: string }, content: string) =>
  client(proxy, ids).messages.create({ model: "claude", max_tokens: 64, stream: true, messages: [{ role: "user", content }] });

/** The error a streamed call ends with; `onEvent` sees each event that arrived before it. */
async function streamFailure(
  proxy: LLMProxy,
  ids: { rid: string; aid: string },
  onEvent: (e: Anthropic.RawMessageStreamEvent) => void = () => undefined,
): Promise<APIError> {
  const stream = await streamCall(proxy, ids, "go");
  return failure(
    (async () => {
      for await (const e of stream) onEvent(e);
    })(),
  );
}

describe("the Anthropic Messages route", () => {
  it("passes a whole answer through with the upstream's key and the client's version and beta headers, and records it", async () => {
    const proxy = await startProxy();
    const ids = await attempt();
    const answer = message([{ type: "text", text: "Hello there." }], {
      usage: { input_tokens: 12, cache_read_input_tokens: 8, output_tokens: 4 },
    });
    a.script.push({ kind: "json", body: answer });
    let clientHeaders = new Headers();
    const watched: typeof fetch = (url, init) => {
      clientHeaders = new Headers(init?.headers);
      return fetch(url, init);
    };
    const got = await client(proxy, ids, { apiKey: "client-key" }, watched).messages.create(
      { model: "claude", max_tokens: 64, system: "Be brief.", messages: [{ role: "user", content: "Hi" }] },
      { headers: { "anthropic-beta": "token-efficient-tools-2025-02-19" } },
    );
    expect(got).toEqual(answer);

    const [sent] = a.received;
    expect(sent.path).toBe("/v1/messages");
    expect(sent.body).toMatchObject({ model: "claude-served", max_tokens: 64, system: "Be brief." });
    expect(sent.headers["x-api-key"]).toBe("sk-upstream");
    expect(sent.headers["anthropic-version"]).toBe(clientHeaders.get("anthropic-version"));
    expect(sent.headers["anthropic-beta"]).toBe("token-efficient-tools-2025-02-19");
    expect(sent.headers.authorization).toBeUndefined();

    const spans = await spansOf(ids.rid);
    expect(spans.map((s) => [s.name, s.attempt_id, s.sequence_id, s.status.status_code])).toEqual([[LLM_CALL_SPAN_NAME, ids.aid, 1, "OK"]]);
    expect(spans[0].attributes).toMatchObject({
      "gen_ai.request.model": "claude-served",
      "gen_ai.request.max_tokens": 64,
      "gen_ai.response.id": answer.id,
      "gen_ai.completion.0.finish_reason": "stop",
      "gen_ai.usage.prompt_tokens": 20,
      "gen_ai.usage.completion_tokens": 4,
      [PROXY_ATTRIBUTES.model]: "claude",
      [PROXY_ATTRIBUTES.upstream]: aBase,
      [PROXY_ATTRIBUTES.stream]: false,
    });
    expect(new TraceToMessages().adapt(spans)[0].messages).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: "Hi" },
      { role: "assistant", content: "Hello there." },
    ]);
  });

  it("streams the events through and records the assembled answer with the final usage", async () => {
    const proxy = await startProxy();
    const ids = await attempt();
    const events = streamed("msg_stream", [{ text: "Streaming works fine." }], "end_turn");
    a.script.push({ kind: "sse", named: true, events });
    const stream = await streamCall(proxy, ids, "Stream please");
    const types: string[] = [];
    let text = "";
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === "content_block_delta" && e.delta.type === "text_delta") text += e.delta.text;
    }
    // Everything the upstream sent, in order (the client skips pings).
    expect(types).toEqual(events.map((e) => e.type).filter((t) => t !== "ping"));
    expect(text).toBe("Streaming works fine.");
    expect(a.received[0].headers.accept).toBe("text/event-stream");

    const spans = await spansOf(ids.rid);
    expect(spans).toHaveLength(1);
    expect(spans[0].status.status_code).toBe("OK");
    expect(spans[0].attributes).toMatchObject({
      "gen_ai.request.stream": true,
      "gen_ai.response.id": "msg_stream",
      "gen_ai.completion.0.content": "Streaming works fine.",
      "gen_ai.completion.0.finish_reason": "stop",
      "gen_ai.usage.prompt_tokens": 30,
      "gen_ai.usage.completion_tokens": 17,
      [PROXY_ATTRIBUTES.stream]: true,
    });
  });

  it("carries a tool-use round trip: a streamed tool_use block, then its tool_result, read back as chat records", async () => {
    const proxy = await startProxy();
    const ids = await attempt();
    const anthropic = client(proxy, ids);
    const tool = { id: "toolu_01", name: "weather", input: { city: "Paris" } };
    a.script.push({ kind: "sse", named: true, events: streamed("msg_t1", [{ text: "Let me check." }, { tool }], "tool_use") });
    a.script.push({ kind: "json", body: message([{ type: "text", text: "It is sunny in Paris." }]) });

    const question = { role: "user" as const, content: "Weather in Paris?" };
    const first = await anthropic.messages
      .stream({ model: "claude", max_tokens: 64, tools: [weather], messages: [question] })
      .finalMessage();
    expect(first.stop_reason).toBe("tool_use");
    const toolUse = first.content.find((c) => c.type === "tool_use");
    expect(toolUse).toEqual({ type: "tool_use", ...tool });

    const second = await anthropic.messages.create({
      model: "claude",
      max_tokens: 64,
      tools: [weather],
      messages: [
        question,
        { role: "assistant", content: first.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: tool.id, content: "sunny, 24 C" }] },
      ],
    });
    expect(second.content).toEqual([{ type: "text", text: "It is sunny in Paris." }]);
    expect(a.received[1].body.messages).toEqual([
      question,
      { role: "assistant", content: first.content },
      { role: "user", content: [{ type: "tool_result", tool_use_id: tool.id, content: "sunny, 24 C" }] },
    ]);

    const spans = (await spansOf(ids.rid)).sort((x, y) => x.sequence_id - y.sequence_id);
    expect(spans.map((s) => s.sequence_id)).toEqual([1, 2]);
    const call = { id: tool.id, type: "function", function: { name: "weather", arguments: '{"city":"Paris"}' } };
    const toolDefs = [
      { type: "function", function: { name: "weather", description: weather.description, parameters: weather.input_schema } },
    ];
    expect(new TraceToMessages().adapt(spans)).toEqual([
      {
        messages: [
          { role: "user", content: "Weather in Paris?" },
          { role: "assistant", content: "Let me check.", tool_calls: [call] },
        ],
        tools: toolDefs,
      },
      {
        messages: [
          { role: "user", content: "Weather in Paris?" },
          { role: "assistant", content: null, tool_calls: [call] },
          { role: "tool", content: "sunny, 24 C", tool_call_id: tool.id },
          { role: "assistant", content: "It is sunny in Paris." },
        ],
        tools: toolDefs,
      },
    ]);
    expect(spans[0].attributes["gen_ai.completion.0.finish_reason"]).toBe("tool_calls");
  });

  it("passes the query on (Claude Code's ?beta=true), names a default API version, and forwards count_tokens without recording it", async () => {
    const proxy = await startProxy();
    const ids = await attempt();
    const llm = proxy.asResource({ rolloutId: ids.rid, attemptId: ids.aid, model: "claude" });
    const raw = await fetch(`${llm.endpoint}/messages?beta=true`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": "k" },
      body: JSON.stringify({ model: "claude", max_tokens: 8, messages: [{ role: "user", content: "hi" }] }),
    });
    expect(raw.status).toBe(200);
    expect(a.received[0].search).toBe("?beta=true");
    expect(a.received[0].headers["anthropic-version"]).toBe("2023-06-01");

    const anthropic = client(proxy, ids);

    a.script.push({ kind: "json", body: { input_tokens: 7 } });
    const counted = await anthropic.messages.countTokens({ model: "claude", messages: [{ role: "user", content: "hi" }] });
    expect(counted).toEqual({ input_tokens: 7 });
    expect(a.received[1].path).toBe("/v1/messages/count_tokens");
    expect(a.received[1].body.model).toBe("claude-served");
    expect((await spansOf(ids.rid)).map((s) => s.sequence_id)).toEqual([1]);
  });
});

describe("errors on the Anthropic Messages route", () => {
  it("gives the client an upstream's 4xx in Anthropic's shape as it came and records an error span", async () => {
    const proxy = await startProxy();
    const ids = await attempt();
    const body = { type: "error", error: { type: "invalid_request_error", message: "max_tokens: must be at most 8192" } };
    a.script.push({ kind: "json", status: 400, body });
    const e = await failure(
      client(proxy, ids).messages.create({ model: "claude", max_tokens: 20000, messages: [{ role: "user", content: "hi" }] }),
    );
    expect(e.status).toBe(400);
    expect(e.error).toEqual(body);
    expect(e.type).toBe("invalid_request_error");

    const [span] = await spansOf(ids.rid);
    expect(span.status).toEqual({ status_code: "ERROR", description: "upstream answered 400: max_tokens: must be at most 8192" });
    expect(span.attributes["error.type"]).toBe("400");
    expect(span.attributes["gen_ai.prompt.0.content"]).toBe("hi");
  });

  it("gives an upstream's 5xx that is not in Anthropic's shape (a gateway's page) in Anthropic's shape", async () => {
    const proxy = await startProxy();
    const ids = await attempt();
    a.script.push({ kind: "text", status: 503, body: "Service Unavailable" });
    const e = await failure(
      client(proxy, ids).messages.create({ model: "claude", max_tokens: 8, messages: [{ role: "user", content: "hi" }] }),
    );
    expect(e.status).toBe(503);
    expect(e.error).toEqual({ type: "error", error: { type: "api_error", message: "upstream answered 503: Service Unavailable" } });
    const [span] = await spansOf(ids.rid);
    expect(span.status.status_code).toBe("ERROR");
    expect(span.attributes["error.type"]).toBe("503");
  });

  it("answers an unreachable upstream with a 502 api_error and records it", async () => {
    const proxy = await startProxy();
    const ids = await attempt();
    const llm = proxy.asResource({ rolloutId: ids.rid, attemptId: ids.aid, model: "claude-nowhere" });
    const anthropic = new Anthropic({ baseURL: llm.endpoint.replace(/\/v1$/, ""), apiKey: "k", maxRetries: 0 });
    const e = await failure(
      anthropic.messages.create({ model: "claude-nowhere", max_tokens: 8, messages: [{ role: "user", content: "hi" }] }),
    );
    expect(e.status).toBe(502);
    expect(e.type).toBe("api_error");
    expect((e.error as { error: { message: string } }).error.message).toMatch(/cannot reach the upstream/);
    const [span] = await spansOf(ids.rid);
    expect(span.attributes["error.type"]).toBe("502");
  });

  it("ends a stream the upstream breaks off with Anthropic's error event and keeps what arrived on the span", async () => {
    const proxy = await startProxy();
    const ids = await attempt();
    a.script.push({ kind: "sse", named: true, events: streamed("msg_cut", [{ text: "Half of an answer" }], "end_turn"), breakAfter: 5 });
    let text = "";
    const e = await streamFailure(proxy, ids, (ev) => {
      if (ev.type === "content_block_delta" && ev.delta.type === "text_delta") text += ev.delta.text;
    });
    expect(e.type).toBe("api_error");
    expect((e.error as { error: { message: string } }).error.message).toMatch(/the upstream stream broke off/);
    expect(text).toBe("Half of ");

    const [span] = await spansOf(ids.rid);
    expect(span.status.status_code).toBe("ERROR");
    expect(span.status.description).toMatch(/the upstream stream broke off/);
    expect(span.attributes["gen_ai.completion.0.content"]).toBe("Half of ");
  });

  it("passes an error event the upstream sends mid-stream to the client and records it with its status", async () => {
    const proxy = await startProxy();
    const ids = await attempt();
    const events = streamed("msg_over", [{ text: "Some" }], "end_turn").slice(0, 4);
    events.push({ type: "error", error: { type: "overloaded_error", message: "Overloaded" } });
    a.script.push({ kind: "sse", named: true, events });
    const e = await streamFailure(proxy, ids);
    expect(e.type).toBe("overloaded_error");
    const [span] = await spansOf(ids.rid);
    expect(span.status).toEqual({ status_code: "ERROR", description: "the upstream stream reported overloaded_error: Overloaded" });
    expect(span.attributes["error.type"]).toBe("529");
    expect(span.attributes["gen_ai.completion.0.content"]).toBe("Some");
  });

  it("answers its own refusals in Anthropic's shape: an unknown model, a model served over OpenAI's API, a bad body", async () => {
    const proxy = await startProxy();
    const anthropic = client(proxy);
    const unknown = await failure(anthropic.messages.create({ model: "nope", max_tokens: 8, messages: [{ role: "user", content: "hi" }] }));
    expect(unknown.status).toBe(404);
    expect(unknown.type).toBe("not_found_error");
    expect(unknown.error).toMatchObject({ type: "error", error: { message: expect.stringMatching(/The model 'nope' does not exist/) } });

    const openAiModel = await failure(
      anthropic.messages.create({ model: "gpt", max_tokens: 8, messages: [{ role: "user", content: "hi" }] }),
    );
    expect(openAiModel.status).toBe(400);
    expect(openAiModel.type).toBe("invalid_request_error");
    expect(openAiModel.error).toMatchObject({
      error: { message: expect.stringMatching(/'gpt' is served over the OpenAI API: call POST \/v1\/chat\/completions/) },
    });

    const badBody = await failure(
      anthropic.messages.create({ max_tokens: 8, messages: [] } as unknown as Anthropic.MessageCreateParamsNonStreaming),
    );
    expect(badBody.status).toBe(400);
    expect(badBody.error).toMatchObject({
      type: "error",
      error: { type: "invalid_request_error", message: expect.stringMatching(/at model/) },
    });
    expect(a.received).toHaveLength(0);

    // And the other way round: an Anthropic model on the OpenAI route, in OpenAI's shape.
    const openai = new OpenAI({ baseURL: proxy.endpoint, apiKey: "k", maxRetries: 0 });
    const wrongRoute = await openai.chat.completions
      .create({ model: "claude", messages: [{ role: "user", content: "hi" }] })
      .catch((err: unknown) => err);
    expect(wrongRoute).toBeInstanceOf(OpenAI.APIError);
    expect((wrongRoute as InstanceType<typeof OpenAI.APIError>).status).toBe(400);
    expect((wrongRoute as InstanceType<typeof OpenAI.APIError>).code).toBe("wrong_api");
    expect((wrongRoute as Error).message).toMatch(/'claude' is served over the Anthropic Messages API: call POST \/v1\/messages/);
    expect(a.received).toHaveLength(0);
  });
});

describe("credentials on the Anthropic Messages route", () => {
  it("takes the proxy's token as x-api-key or a bearer token, refuses a wrong one in Anthropic's shape, and never sends it upstream", async () => {
    const proxy = await startProxy({ token: "proxy-token" });
    const ask = (anthropic: Anthropic, model = "claude") =>
      anthropic.messages.create({ model, max_tokens: 8, messages: [{ role: "user", content: "hi" }] });

    await ask(client(proxy, undefined, { xApiKey: "proxy-token" }));
    await ask(client(proxy, undefined, { apiKey: "proxy-token" }));
    expect(a.received.map((r) => [r.headers["x-api-key"], r.headers.authorization])).toEqual([
      ["sk-upstream", undefined],
      ["sk-upstream", undefined],
    ]);

    for (const credential of [{ xApiKey: "not-the-token" }, { apiKey: "not-the-token" }]) {
      const wrong = await failure(ask(client(proxy, undefined, credential)));
      expect(wrong.status).toBe(401);
      expect(wrong.type).toBe("authentication_error");
    }
    expect(a.received).toHaveLength(2);

    // A model without a key of its own gets no credential from a client of a proxy with a token.
    await ask(client(proxy, undefined, { xApiKey: "proxy-token" }), "claude-keyless");
    expect(b.received[0].headers["x-api-key"]).toBeUndefined();
    expect(b.received[0].headers.authorization).toBeUndefined();
  });

  it("passes the client's own key on, as it came, to a model without a key when the proxy has no token", async () => {
    const proxy = await startProxy();
    for (const credential of [{ xApiKey: "sk-client" }, { apiKey: "sk-client" }])
      await client(proxy, undefined, credential).messages.create({
        model: "claude-keyless",
        max_tokens: 8,
        messages: [{ role: "user", content: "hi" }],
      });
    expect(b.received.map((r) => [r.path, r.headers["x-api-key"], r.headers.authorization])).toEqual([
      ["/v1/messages", "sk-client", undefined],
      ["/v1/messages", undefined, "Bearer sk-client"],
    ]);
  });

  it("leaves the OpenAI routes as they were: an Authorization bearer key to an OpenAI upstream", async () => {
    const proxy = await startProxy();
    a.script.push({ kind: "json", body: chatAnswer("hi") });
    const openai = new OpenAI({ baseURL: proxy.endpoint, apiKey: "k", maxRetries: 0 });
    await openai.chat.completions.create({ model: "gpt", messages: [{ role: "user", content: "hi" }] });
    expect(a.received[0].path).toBe("/v1/chat/completions");
    expect(a.received[0].headers["anthropic-version"]).toBeUndefined();
  });
});
