/**
 * The LLM proxy through the official `openai` client: in front of the real policy server (token ids,
 * spans the adapters read), and in front of scripted upstreams that fail, throttle, stall and die
 * mid-stream (retries, round robin, the errors the caller and the span get).
 */
import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { LlmProxyTraceToTriplet, TraceToMessages, TracerTraceToTriplet } from "../../src/adapter/index.ts";
import { initParams, presetConfig } from "../../src/model/index.ts";
import { LLM_CALL_SPAN_NAME, LLMProxy, ModelPolicy, PolicyServer, PROXY_ATTRIBUTES } from "../../src/proxy/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { ValidationError } from "../../src/types/errors.ts";
import { proxyHarness } from "./proxy-harness.ts";
import { chatAnswer, chatChunk, type ScriptedUpstream, startScriptedUpstream } from "./scripted-upstream.ts";

const config = { ...presetConfig("tiny"), max_seq_len: 64 };
const policy = new ModelPolicy({ model: "tiny-policy", config, params: initParams(config, 3), seed: 11 });
const policyServer = new PolicyServer({ policy });
const store = new InMemoryLightningStore();
let a: ScriptedUpstream;
let b: ScriptedUpstream;

/** Retry delays asked for: (retry, Retry-After seconds). The proxy waits 0 ms in these tests. */
const delays: [number, number | null][] = [];

beforeAll(async () => {
  await policyServer.start();
  a = await startScriptedUpstream();
  b = await startScriptedUpstream();
});
afterAll(async () => {
  await Promise.all([policyServer.stop(), a.stop(), b.stop()]);
});
const { startProxy, attempt, spansOf, reset } = proxyHarness(
  store,
  () => [a, b],
  () => ({
    models: [
      { name: "policy", upstreams: [policyServer.endpoint], params: { return_token_ids: true, model: "tiny-policy" } },
      { name: "scripted", upstreams: [a.url, b.url], max_retries: 2, timeout_s: 5 },
    ],
    retryDelay: (retry, retryAfter) => {
      delays.push([retry, retryAfter]);
      return 0;
    },
  }),
);
afterEach(async () => {
  await reset();
  delays.length = 0;
});

function client(proxy: LLMProxy, ids?: { rid: string; aid: string }, model = "scripted", apiKey = "unused"): OpenAI {
  const llm = ids ? proxy.asResource({ rolloutId: ids.rid, attemptId: ids.aid, model }) : proxy.asResource({ model });
  return new OpenAI({ baseURL: llm.endpoint, apiKey, maxRetries: 0 });
}

type WithIds = { prompt_token_ids: number[]; choices: { token_ids: number[] }[] };

describe("LLM proxy in front of the policy server", () => {
  it("passes a chat call through and stores one litellm_request span the adapters turn into a triplet and messages", async () => {
    const proxy = await startProxy();
    const ids = await attempt();
    const messages = [
      { role: "system" as const, content: "Be brief." },
      { role: "user" as const, content: "2+3=" },
    ];
    const res = await client(proxy, ids, "policy").chat.completions.create({ model: "policy", messages, max_tokens: 5, temperature: 0 });
    const raw = res as unknown as WithIds;
    expect(raw.prompt_token_ids.length).toBeGreaterThan(0);
    expect(raw.choices[0].token_ids.length).toBeGreaterThan(0);

    const spans = await spansOf(ids.rid);
    expect(spans.map((s) => [s.name, s.rollout_id, s.attempt_id, s.sequence_id])).toEqual([[LLM_CALL_SPAN_NAME, ids.rid, ids.aid, 1]]);
    const attrs = spans[0].attributes;
    expect(attrs.prompt_token_ids).toEqual(raw.prompt_token_ids);
    expect(attrs.response_token_ids).toEqual(raw.choices[0].token_ids);
    expect(attrs["gen_ai.request.model"]).toBe("tiny-policy");
    expect(attrs[PROXY_ATTRIBUTES.model]).toBe("policy");
    expect(attrs[PROXY_ATTRIBUTES.upstream]).toBe(policyServer.endpoint);
    expect(attrs[PROXY_ATTRIBUTES.attempts]).toBe(1);
    expect(spans[0].status.status_code).toBe("OK");
    expect(spans[0].end_time!).toBeGreaterThanOrEqual(spans[0].start_time!);

    const triplets = new LlmProxyTraceToTriplet().adapt(spans);
    expect(triplets).toHaveLength(1);
    expect(triplets[0].prompt.token_ids).toEqual(raw.prompt_token_ids);
    expect(triplets[0].response.token_ids).toEqual(raw.choices[0].token_ids);
    expect(new TracerTraceToTriplet({ llmCallMatch: LLM_CALL_SPAN_NAME }).adapt(spans)[0].response.token_ids).toEqual(
      raw.choices[0].token_ids,
    );
    expect(new TraceToMessages().adapt(spans)[0].messages).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: "2+3=" },
      { role: "assistant", content: res.choices[0].message.content },
    ]);
  });

  it("streams chunks through as they come and records the assembled answer with its token ids", async () => {
    const proxy = await startProxy();
    const ids = await attempt();
    const stream = await client(proxy, ids, "policy").chat.completions.create({
      model: "policy",
      messages: [{ role: "user", content: "hello" }],
      max_tokens: 8,
      temperature: 0.7,
      stream: true,
    });
    let text = "";
    const tokenIds: number[] = [];
    let promptIds: number[] = [];
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      const c = chunk as unknown as { prompt_token_ids?: number[]; choices: { token_ids?: number[] }[] };
      tokenIds.push(...(c.choices[0]?.token_ids ?? []));
      if (c.prompt_token_ids) promptIds = c.prompt_token_ids;
    }
    const spans = await spansOf(ids.rid);
    expect(spans).toHaveLength(1);
    expect(spans[0].attributes["gen_ai.completion.0.content"]).toBe(text);
    expect(spans[0].attributes.response_token_ids).toEqual(tokenIds);
    expect(spans[0].attributes.prompt_token_ids).toEqual(promptIds);
    expect(spans[0].attributes[PROXY_ATTRIBUTES.stream]).toBe(true);
    expect(new LlmProxyTraceToTriplet().adapt(spans)[0].response.token_ids).toEqual(tokenIds);
  });

  it("serves /v1/completions too", async () => {
    const proxy = await startProxy();
    const ids = await attempt();
    const res = await client(proxy, ids, "policy").completions.create({ model: "policy", prompt: "abc", max_tokens: 4, temperature: 0 });
    const spans = await spansOf(ids.rid);
    expect(spans[0].attributes["gen_ai.prompt.0.content"]).toBe("abc");
    expect(spans[0].attributes["gen_ai.completion.0.content"]).toBe(res.choices[0].text);
    expect(spans[0].attributes.response_token_ids).toEqual((res as unknown as WithIds).choices[0].token_ids);
  });

  it("gives 10 concurrent calls of one attempt the sequence ids 1..10", async () => {
    const proxy = await startProxy();
    const ids = await attempt();
    const c = client(proxy, ids, "policy");
    await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        c.chat.completions.create({ model: "policy", messages: [{ role: "user", content: `q${i}` }], max_tokens: 2 }),
      ),
    );
    const spans = await spansOf(ids.rid);
    expect(spans.map((s) => s.sequence_id).sort((x, y) => x - y)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  });
});

describe("LLM proxy in front of scripted upstreams", () => {
  it("sends the entry's params and model name upstream, and the API key from the named variable", async () => {
    const proxy = await startProxy({
      models: [{ name: "m", upstreams: [a.url], api_key_env: "UPSTREAM_KEY", params: { return_token_ids: true, model: "served-name" } }],
      env: (n) => (n === "UPSTREAM_KEY" ? "k-123" : undefined),
    });
    await client(proxy, undefined, "m").chat.completions.create({
      model: "m",
      messages: [{ role: "user", content: "hi" }],
      temperature: 0.5,
    });
    expect(a.received).toHaveLength(1);
    expect(a.received[0].body).toEqual({
      model: "served-name",
      messages: [{ role: "user", content: "hi" }],
      temperature: 0.5,
      return_token_ids: true,
    });
    expect(a.received[0].headers.authorization).toBe("Bearer k-123");
  });

  it("round-robins across upstreams", async () => {
    const proxy = await startProxy();
    const c = client(proxy);
    for (let i = 0; i < 4; i++) await c.chat.completions.create({ model: "scripted", messages: [{ role: "user", content: "x" }] });
    expect([a.received.length, b.received.length]).toEqual([2, 2]);
  });

  it("retries a 500 on the next upstream and records the attempts", async () => {
    const proxy = await startProxy();
    const ids = await attempt();
    a.script.push({ kind: "json", status: 500, body: { error: { message: "boom" } } });
    b.script.push({ kind: "json", body: chatAnswer("second try") });
    const res = await client(proxy, ids).chat.completions.create({ model: "scripted", messages: [{ role: "user", content: "x" }] });
    expect(res.choices[0].message.content).toBe("second try");
    expect([a.received.length, b.received.length]).toEqual([1, 1]);
    expect(delays).toEqual([[0, null]]);
    const [span] = await spansOf(ids.rid);
    expect(span.attributes[PROXY_ATTRIBUTES.attempts]).toBe(2);
    expect(span.attributes[PROXY_ATTRIBUTES.upstream]).toBe(b.url);
    expect(span.status.status_code).toBe("OK");
  });

  it("honours a short Retry-After on a 429", async () => {
    const proxy = await startProxy();
    a.script.push({ kind: "json", status: 429, body: { error: { message: "slow down" } }, headers: { "retry-after": "2" } });
    await client(proxy).chat.completions.create({ model: "scripted", messages: [{ role: "user", content: "x" }] });
    expect(delays).toEqual([[0, 2]]);
    expect([a.received.length, b.received.length]).toEqual([1, 1]);
  });

  it("gives the caller the upstream's status and message once retries are spent, and the span the error", async () => {
    const proxy = await startProxy();
    const ids = await attempt();
    const fail = { kind: "json" as const, status: 503, body: { error: { message: "overloaded", type: "server_error" } } };
    a.script.push(fail, fail);
    b.script.push(fail);
    const err = await client(proxy, ids)
      .chat.completions.create({ model: "scripted", messages: [{ role: "user", content: "x" }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(503);
    expect((err as Error).message).toContain("overloaded");
    expect([a.received.length, b.received.length]).toEqual([2, 1]);
    expect(delays.map((d) => d[0])).toEqual([0, 1]);
    const [span] = await spansOf(ids.rid);
    expect(span.status).toEqual({ status_code: "ERROR", description: "upstream answered 503: overloaded" });
    expect(span.attributes["error.type"]).toBe("503");
    expect(span.attributes[PROXY_ATTRIBUTES.attempts]).toBe(3);
    expect(span.attributes["gen_ai.prompt.0.content"]).toBe("x");
  });

  it("does not retry a 400", async () => {
    const proxy = await startProxy();
    a.script.push({ kind: "json", status: 400, body: { error: { message: "bad field" } } });
    const err = await client(proxy)
      .chat.completions.create({ model: "scripted", messages: [{ role: "user", content: "x" }] })
      .catch((e: unknown) => e);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(400);
    expect([a.received.length, b.received.length]).toEqual([1, 0]);
  });

  it("times out a stalled upstream, retries, and answers 504 when every attempt stalls", async () => {
    const proxy = await startProxy({ models: [{ name: "scripted", upstreams: [a.url, b.url], timeout_s: 0.2, max_retries: 1 }] });
    const ids = await attempt();
    a.script.push({ kind: "stall" });
    b.script.push({ kind: "stall" });
    const err = await client(proxy, ids)
      .chat.completions.create({ model: "scripted", messages: [{ role: "user", content: "x" }] })
      .catch((e: unknown) => e);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(504);
    expect([a.received.length, b.received.length]).toEqual([1, 1]);
    const [span] = await spansOf(ids.rid);
    expect(span.status.status_code).toBe("ERROR");
    expect(span.status.description).toMatch(/did not answer within 0.2 s/);
    expect(span.attributes["error.type"]).toBe("504");
  });

  it("answers 502 when no upstream can be reached", async () => {
    const dead = await startScriptedUpstream();
    await dead.stop();
    const proxy = await startProxy({ models: [{ name: "scripted", upstreams: [dead.url], max_retries: 1 }] });
    const ids = await attempt();
    const err = await client(proxy, ids)
      .chat.completions.create({ model: "scripted", messages: [{ role: "user", content: "x" }] })
      .catch((e: unknown) => e);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
    const [span] = await spansOf(ids.rid);
    expect(span.attributes["error.type"]).toBe("502");
    expect(span.attributes[PROXY_ATTRIBUTES.attempts]).toBe(2);
  });

  it("passes a stream through and, when the upstream dies mid-stream, errors the caller and keeps what arrived", async () => {
    const proxy = await startProxy();
    const ids = await attempt();
    const events = [
      chatChunk({ role: "assistant", content: "" }),
      chatChunk({ content: "Hel" }),
      chatChunk({ content: "lo" }),
      chatChunk({}, "stop"),
    ];
    a.script.push({ kind: "sse", events });
    b.script.push({ kind: "sse", events, breakAfter: 2 });
    const c = client(proxy, ids);
    const collect = async () => {
      let text = "";
      const s = await c.chat.completions.create({ model: "scripted", messages: [{ role: "user", content: "x" }], stream: true });
      for await (const chunk of s) text += chunk.choices[0]?.delta.content ?? "";
      return text;
    };
    expect(await collect()).toBe("Hello");
    let partial = "";
    const err = await (async () => {
      const s = await c.chat.completions.create({ model: "scripted", messages: [{ role: "user", content: "y" }], stream: true });
      for await (const chunk of s) partial += chunk.choices[0]?.delta.content ?? "";
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as Error).message).toMatch(/upstream stream broke off/);
    expect(partial).toBe("Hel");
    const spans = (await spansOf(ids.rid)).sort((x, y) => x.sequence_id - y.sequence_id);
    expect(spans.map((s) => s.status.status_code)).toEqual(["OK", "ERROR"]);
    expect(spans[0].attributes["gen_ai.completion.0.content"]).toBe("Hello");
    expect(spans[0].attributes["gen_ai.completion.0.finish_reason"]).toBe("stop");
    expect(spans[1].attributes["gen_ai.completion.0.content"]).toBe("Hel");
    expect(spans[1].status.description).toMatch(/upstream stream broke off/);
  });

  it("ends a stream that stalls midway with an error event once the timeout passes without a chunk", async () => {
    const proxy = await startProxy({ models: [{ name: "scripted", upstreams: [a.url], timeout_s: 0.3 }] });
    const ids = await attempt();
    a.script.push({ kind: "sse", events: [chatChunk({ role: "assistant", content: "" }), chatChunk({ content: "Hi" })], stallAfter: 2 });
    let partial = "";
    const err = await (async () => {
      const s = await client(proxy, ids).chat.completions.create({
        model: "scripted",
        messages: [{ role: "user", content: "x" }],
        stream: true,
      });
      for await (const chunk of s) partial += chunk.choices[0]?.delta.content ?? "";
    })().catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/did not answer within 0.3 s/);
    expect(partial).toBe("Hi");
    const [span] = await spansOf(ids.rid);
    expect(span.status.status_code).toBe("ERROR");
    expect(span.attributes["gen_ai.completion.0.content"]).toBe("Hi");
  });

  it("retries a stream whose upstream fails before answering", async () => {
    const proxy = await startProxy();
    a.script.push({ kind: "json", status: 500, body: { error: { message: "no" } } });
    b.script.push({ kind: "sse", events: [chatChunk({ role: "assistant", content: "fine" }), chatChunk({}, "stop")] });
    let text = "";
    const s = await client(proxy).chat.completions.create({ model: "scripted", messages: [{ role: "user", content: "x" }], stream: true });
    for await (const chunk of s) text += chunk.choices[0]?.delta.content ?? "";
    expect(text).toBe("fine");
  });

  it("passes a tool-call round trip through unchanged and keeps the calls in the spans and in TraceToMessages", async () => {
    const proxy = await startProxy({ models: [{ name: "scripted", upstreams: [a.url] }] });
    const ids = await attempt();
    const tools = [
      {
        type: "function" as const,
        function: {
          name: "get_weather",
          description: "Weather of a city",
          parameters: { type: "object", properties: { city: { type: "string" } } },
        },
      },
    ];
    const call = { id: "call_1", type: "function" as const, function: { name: "get_weather", arguments: '{"city":"Paris"}' } };
    const first = {
      ...chatAnswer(""),
      choices: [{ index: 0, message: { role: "assistant", content: null, tool_calls: [call] }, finish_reason: "tool_calls" }],
    };
    a.script.push({ kind: "json", body: first }, { kind: "json", body: chatAnswer("It is sunny.") });
    const c = client(proxy, ids);
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "Weather in Paris?" }];
    const r1 = await c.chat.completions.create({ model: "scripted", messages, tools });
    expect(r1.choices[0].message.tool_calls).toEqual([call]);
    messages.push(r1.choices[0].message, { role: "tool", tool_call_id: "call_1", content: "sunny" });
    const r2 = await c.chat.completions.create({ model: "scripted", messages, tools });
    expect(r2.choices[0].message.content).toBe("It is sunny.");
    expect(a.received[1].body.messages).toEqual(JSON.parse(JSON.stringify(messages)));
    expect(a.received[1].body.tools).toEqual(tools);

    const spans = (await spansOf(ids.rid)).sort((x, y) => x.sequence_id - y.sequence_id);
    expect(spans[0].attributes["gen_ai.completion.0.tool_calls.0.name"]).toBe("get_weather");
    expect(spans[0].attributes["gen_ai.request.functions.0.name"]).toBe("get_weather");
    const records = new TraceToMessages().adapt(spans);
    expect(records[0].messages.at(-1)).toEqual({ role: "assistant", content: null, tool_calls: [call] });
    expect(records[1].messages).toEqual([
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: null, tool_calls: [call] },
      { role: "tool", content: "sunny", tool_call_id: "call_1" },
      { role: "assistant", content: "It is sunny." },
    ]);
    expect(records[1].tools?.[0]).toMatchObject({ type: "function", function: { name: "get_weather" } });
  });

  it("assembles streamed tool calls for the span", async () => {
    const proxy = await startProxy({ models: [{ name: "scripted", upstreams: [a.url] }] });
    const ids = await attempt();
    a.script.push({
      kind: "sse",
      events: [
        chatChunk({
          role: "assistant",
          tool_calls: [{ index: 0, id: "call_9", type: "function", function: { name: "lookup", arguments: "" } }],
        }),
        chatChunk({ tool_calls: [{ index: 0, function: { arguments: '{"q":' } }] }),
        chatChunk({ tool_calls: [{ index: 0, function: { arguments: '"x"}' } }] }),
        chatChunk({}, "tool_calls"),
      ],
    });
    const s = await client(proxy, ids).chat.completions.create({
      model: "scripted",
      messages: [{ role: "user", content: "x" }],
      stream: true,
    });
    for await (const _ of s) void _;
    const [span] = await spansOf(ids.rid);
    expect(span.attributes["gen_ai.completion.0.tool_calls.0.id"]).toBe("call_9");
    expect(span.attributes["gen_ai.completion.0.tool_calls.0.arguments"]).toBe('{"q":"x"}');
    expect(span.attributes["gen_ai.completion.0.finish_reason"]).toBe("tool_calls");
  });
});

describe("LLM proxy configuration and lifecycle", () => {
  it("answers an unknown model with a 404 model_not_found naming the models served", async () => {
    const proxy = await startProxy();
    const err = await client(proxy, undefined, "policy")
      .chat.completions.create({ model: "gpt-9", messages: [{ role: "user", content: "x" }] })
      .catch((e: unknown) => e);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(404);
    expect((err as InstanceType<typeof OpenAI.APIError>).code).toBe("model_not_found");
    expect((err as Error).message).toContain("'policy', 'scripted'");
  });

  it("refuses a bad model list with the field's path, and a missing API key variable by name", () => {
    expect(() => new LLMProxy({ models: [{ name: "m", upstreams: ["not a url"] }] })).toThrow(/at 0\.upstreams\.0/);
    expect(() => new LLMProxy({ models: [{ name: "m", upstreams: [a.url], max_retries: -1 }] })).toThrow(ValidationError);
    expect(() => new LLMProxy({ models: [] })).toThrow(ValidationError);
    expect(
      () =>
        new LLMProxy({
          models: [
            { name: "m", upstreams: [a.url] },
            { name: "m", upstreams: [b.url] },
          ],
        }),
    ).toThrow(/listed twice/);
    expect(() => new LLMProxy({ models: [{ name: "m", upstreams: [a.url], api_key_env: "NOPE_KEY" }], env: () => undefined })).toThrow(
      /NOPE_KEY .*models\.0\.api_key_env/,
    );
  });

  it("takes a new model list while running, and keeps the old one when the new one is bad", async () => {
    const proxy = await startProxy({ models: [{ name: "one", upstreams: [a.url] }] });
    expect(() => proxy.updateModelList([{ name: "", upstreams: [a.url] }])).toThrow(ValidationError);
    expect(proxy.modelNames).toEqual(["one"]);
    proxy.updateModelList([{ name: "two", upstreams: [b.url] }]);
    const c = client(proxy, undefined, "two");
    await c.chat.completions.create({ model: "two", messages: [{ role: "user", content: "x" }] });
    expect([a.received.length, b.received.length]).toEqual([0, 1]);
    expect((await c.models.list()).data.map((m) => m.id)).toEqual(["two"]);
  });

  it("describes itself as a resource", async () => {
    const proxy = await startProxy();
    expect(() => proxy.asResource()).toThrow(/serves 2 models/);
    expect(() => proxy.asResource({ model: "nope" })).toThrow(ValidationError);
    expect(proxy.asResource({ model: "policy" })).toEqual({
      resource_type: "proxy_llm",
      endpoint: proxy.endpoint,
      model: "policy",
      api_key: null,
      sampling_parameters: {},
    });
    const bound = proxy.asResource({ model: "policy", rolloutId: "r1", attemptId: "a1", samplingParameters: { temperature: 0.5 } });
    expect(bound).toMatchObject({ resource_type: "llm", sampling_parameters: { temperature: 0.5 } });
    expect(bound.endpoint).toBe(`${proxy.endpoint.slice(0, -3)}/rollout/r1/attempt/a1/v1`);
    const single = await startProxy({ models: [{ name: "only", upstreams: [a.url] }] });
    expect(single.asResource().model).toBe("only");
  });

  it("requires its bearer token on every route but /health", async () => {
    const proxy = await startProxy({ token: "s3cret" });
    const base = proxy.endpoint.slice(0, -3);
    expect((await fetch(`${base}/health`)).status).toBe(200);
    // The store server's challenge, in OpenAI's error shape.
    const missing = await fetch(`${proxy.endpoint}/chat/completions`, { method: "POST" });
    expect(missing.status).toBe(401);
    expect(missing.headers.get("www-authenticate")).toBe('Bearer realm="agl"');
    expect(await missing.json()).toEqual({
      error: {
        message: expect.stringMatching(/^Missing bearer token/),
        type: "authentication_error",
        param: null,
        code: "invalid_api_key",
      },
    });
    const wrong = await fetch(`${proxy.endpoint}/chat/completions`, { method: "POST", headers: { authorization: "Bearer wrong" } });
    expect(wrong.headers.get("www-authenticate")).toBe('Bearer realm="agl", error="invalid_token"');
    expect(await wrong.json()).toMatchObject({ error: { message: "Invalid bearer token", code: "invalid_api_key" } });
    const err = await client(proxy, undefined, "scripted", "wrong")
      .chat.completions.create({ model: "scripted", messages: [{ role: "user", content: "x" }] })
      .catch((e: unknown) => e);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(401);
    const ok = await client(proxy, undefined, "scripted", "s3cret").chat.completions.create({
      model: "scripted",
      messages: [{ role: "user", content: "x" }],
    });
    expect(ok.choices[0].message.content).toBe("ok");
  });

  it("stops cleanly with a call in flight: the call is cancelled, its span written, the port closed", async () => {
    const proxy = await startProxy();
    const ids = await attempt();
    a.script.push({ kind: "stall" });
    const pending = client(proxy, ids)
      .chat.completions.create({ model: "scripted", messages: [{ role: "user", content: "x" }] })
      .catch((e: unknown) => e);
    while (a.received.length === 0) await new Promise((r) => setTimeout(r, 5));
    const endpoint = proxy.endpoint;
    await proxy.stop();
    const err = await pending;
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(503);
    const [span] = await spansOf(ids.rid);
    expect(span.status.description).toMatch(/stopping/);
    expect(proxy.isRunning()).toBe(false);
    await expect(fetch(`${endpoint.slice(0, -3)}/health`)).rejects.toThrow();
    expect(b.received).toHaveLength(0);
  });

  it("stops with a stream in flight: the caller gets an error event, the span what arrived", async () => {
    const proxy = await startProxy({ models: [{ name: "scripted", upstreams: [a.url] }] });
    const ids = await attempt();
    a.script.push({ kind: "sse", events: [chatChunk({ role: "assistant", content: "" }), chatChunk({ content: "par" })], stallAfter: 2 });
    let partial = "";
    const s = await client(proxy, ids).chat.completions.create({
      model: "scripted",
      messages: [{ role: "user", content: "x" }],
      stream: true,
    });
    const reading = (async () => {
      for await (const chunk of s) partial += chunk.choices[0]?.delta.content ?? "";
    })().catch((e: unknown) => e);
    while (partial === "") await new Promise((r) => setTimeout(r, 5));
    await proxy.stop();
    expect(((await reading) as Error).message).toMatch(/stopping/);
    expect(partial).toBe("par");
    const [span] = await spansOf(ids.rid);
    expect(span.status.status_code).toBe("ERROR");
    expect(span.attributes["gen_ai.completion.0.content"]).toBe("par");
  });
});
