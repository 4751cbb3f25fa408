/**
 * traceOpenAI: the real `openai` client against real OpenAI-compatible servers on ports (the policy server
 * with a tiny model, which returns token ids, and a scripted upstream for tool calls and errors), inside
 * OtelTracer contexts and a runner rollout: what the spans hold, what the adapters make of them, and that
 * the caller sees exactly what an untraced client sees.
 */
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TraceToMessages, TracerTraceToTriplet } from "../../src/adapter/index.ts";
import { applyChatTemplate, initParams, presetConfig } from "../../src/model/index.ts";
import { ModelPolicy, PolicyServer } from "../../src/proxy/index.ts";
import { LitAgent, LitAgentRunner } from "../../src/runner/index.ts";
import { InMemoryLightningStore } from "../../src/store/index.ts";
import {
  emitReward,
  instrumentOpenAI,
  OPENAI_CHAT_SPAN_NAME,
  OPENAI_COMPLETION_SPAN_NAME,
  OtelTracer,
  STREAM_ENDED_EARLY_ATTRIBUTE,
  traceOpenAI,
} from "../../src/tracer/index.ts";
import { ValidationError } from "../../src/types/index.ts";
import { PROMPT_IDS, serveScriptedUpstream, TEXT_IDS, TEXT_PIECES, TOOL_CALL } from "./openai-upstream.ts";

const config = { ...presetConfig("tiny"), max_seq_len: 64 };
const policy = new ModelPolicy({ model: "tiny-policy", config, params: initParams(config, 3), seed: 11 });
const server = new PolicyServer({ policy });
let upstream: Awaited<ReturnType<typeof serveScriptedUpstream>>;

beforeAll(async () => {
  await server.start();
  upstream = await serveScriptedUpstream();
});
afterAll(async () => {
  await server.stop();
  await upstream.stop();
});

const policyClient = () => new OpenAI({ baseURL: server.endpoint, apiKey: "unused", maxRetries: 0 });
const scriptedClient = () => new OpenAI({ baseURL: upstream.baseURL, apiKey: "unused", maxRetries: 0 });

/** Runs `fn` in an OtelTracer context of a fresh attempt and returns the attempt's stored spans. */
async function traced(fn: () => Promise<void>) {
  const store = new InMemoryLightningStore();
  const tracer = new OtelTracer();
  tracer.initWorker(0, store);
  const r = await store.startRollout(null);
  await tracer.traceContext({ rolloutId: r.rollout_id, attemptId: r.attempt.attempt_id }, fn);
  return (await store.querySpans(r.rollout_id)).items;
}

type WithIds = { prompt_token_ids: number[]; choices: { token_ids: number[] }[] };
const messages = [
  { role: "system" as const, content: "Be brief." },
  { role: "user" as const, content: "2+3=" },
];

describe("traceOpenAI with the policy server (token ids)", () => {
  it("records a chat call inside a runner rollout: the triplet has the token ids and the reward, TraceToMessages the messages", async () => {
    const store = new InMemoryLightningStore();
    await store.addResources({ llm: server.asResource() });
    let answer: OpenAI.ChatCompletion | undefined;
    class Agent extends LitAgent<{ q: string }> {
      override async rollout(task: { q: string }) {
        const client = traceOpenAI(policyClient());
        answer = await client.chat.completions.create({ model: "tiny-policy", messages, max_tokens: 6, temperature: 0 });
        emitReward(task.q === "2+3=" ? 1 : 0);
      }
    }
    const runner = new LitAgentRunner<{ q: string }>({ pollInterval: 0.01, heartbeatInterval: 0 });
    const rollout = await runner.withRunContext({ agent: new Agent(), store }, (r) => r.step({ q: "2+3=" }));
    expect(rollout.status).toBe("succeeded");
    const spans = (await store.querySpans(rollout.rollout_id)).items;
    expect(spans.map((s) => s.name)).toEqual([OPENAI_CHAT_SPAN_NAME, "agentlightning.annotation"]);
    const raw = answer as unknown as WithIds;
    expect(raw.prompt_token_ids).toEqual(applyChatTemplate(messages, { addGenerationPrompt: true }));
    expect(spans[0]!.status.status_code).toBe("UNSET");
    expect(spans[0]!.attributes).toMatchObject({
      "gen_ai.operation.name": "chat",
      "gen_ai.request.model": "tiny-policy",
      "gen_ai.response.id": answer!.id,
      prompt_token_ids: raw.prompt_token_ids,
      response_token_ids: raw.choices[0]!.token_ids,
    });
    expect(spans[0]!.end_time!).toBeGreaterThanOrEqual(spans[0]!.start_time!);

    const [triplet, ...more] = new TracerTraceToTriplet().adapt(spans);
    expect(more).toEqual([]);
    expect(triplet!.prompt.token_ids).toEqual(raw.prompt_token_ids);
    expect(triplet!.response.token_ids).toEqual(raw.choices[0]!.token_ids);
    expect(triplet!.response.token_ids.length).toBeGreaterThan(0);
    expect(triplet!.reward).toBe(1);
    expect(triplet!.metadata.response_id).toBe(answer!.id);

    expect(new TraceToMessages().adapt(spans)).toEqual([
      { messages: [...messages, { role: "assistant", content: answer!.choices[0]!.message.content }], tools: null },
    ]);
  });

  it("streams: the caller gets the same chunks as from an untraced client, and the span the assembled answer", async () => {
    const body = {
      model: "tiny-policy",
      messages,
      max_tokens: 8,
      temperature: 0,
      stream: true as const,
      stream_options: { include_usage: true },
    };
    const strip = (c: Record<string, unknown>) => ({ ...c, id: undefined, created: undefined });
    const plain: unknown[] = [];
    for await (const chunk of await policyClient().chat.completions.create(body)) plain.push(strip(chunk as never));
    const seen: unknown[] = [];
    let text = "";
    const spans = await traced(async () => {
      const stream = await traceOpenAI(policyClient()).chat.completions.create(body);
      for await (const chunk of stream) {
        seen.push(strip(chunk as never));
        text += chunk.choices[0]?.delta.content ?? "";
      }
    });
    expect(seen).toEqual(plain);
    expect(spans).toHaveLength(1);
    const tokenIds = seen.flatMap((c) => ((c as { choices: { token_ids?: number[] }[] }).choices[0]?.token_ids ?? []) as number[]);
    expect(spans[0]!.attributes["gen_ai.completion.0.content"]).toBe(text);
    expect(spans[0]!.attributes.response_token_ids).toEqual(tokenIds);
    expect(spans[0]!.attributes).not.toHaveProperty(STREAM_ENDED_EARLY_ATTRIBUTE);
    const [triplet] = new TracerTraceToTriplet().adapt(spans);
    expect(triplet!.prompt.token_ids).toEqual(applyChatTemplate(messages, { addGenerationPrompt: true }));
    expect(triplet!.response.token_ids).toEqual(tokenIds);
  });

  it("records text completions as openai.completion spans, which the default triplet adapter also reads", async () => {
    let res: OpenAI.Completion | undefined;
    const spans = await traced(async () => {
      res = await traceOpenAI(policyClient()).completions.create({ model: "tiny-policy", prompt: "1+1=", max_tokens: 4, temperature: 0 });
    });
    expect(spans.map((s) => s.name)).toEqual([OPENAI_COMPLETION_SPAN_NAME]);
    expect(spans[0]!.attributes["gen_ai.operation.name"]).toBe("text_completion");
    const [triplet] = new TracerTraceToTriplet().adapt(spans);
    expect(triplet!.response.token_ids).toEqual((res as unknown as WithIds).choices[0]!.token_ids);
    expect(triplet!.prompt.token_ids).toEqual((res as unknown as WithIds).prompt_token_ids);
  });
});

describe("traceOpenAI with a scripted upstream", () => {
  it("keeps a tool-call answer on the span and in TraceToMessages, streamed or not", async () => {
    const tools = [
      { type: "function" as const, function: { name: TOOL_CALL.name, description: "Weather", parameters: { type: "object" } } },
    ];
    const ask = { model: "script-tools", messages: [{ role: "user" as const, content: "Weather in Paris?" }], tools };
    let direct: OpenAI.ChatCompletion | undefined;
    let streamedArgs = "";
    const spans = await traced(async () => {
      const client = traceOpenAI(scriptedClient());
      direct = await client.chat.completions.create(ask);
      for await (const chunk of await client.chat.completions.create({ ...ask, stream: true })) {
        streamedArgs += chunk.choices[0]?.delta.tool_calls?.[0]?.function?.arguments ?? "";
      }
    });
    expect(direct!.choices[0]!.message.tool_calls).toEqual([
      { id: TOOL_CALL.id, type: "function", function: { name: TOOL_CALL.name, arguments: TOOL_CALL.arguments } },
    ]);
    expect(streamedArgs).toBe(TOOL_CALL.arguments);
    expect(spans).toHaveLength(2);
    for (const span of spans) {
      expect(span.attributes).toMatchObject({
        "gen_ai.completion.0.finish_reason": "tool_calls",
        "gen_ai.completion.0.tool_calls.0.id": TOOL_CALL.id,
        "gen_ai.completion.0.tool_calls.0.name": TOOL_CALL.name,
        "gen_ai.completion.0.tool_calls.0.arguments": TOOL_CALL.arguments,
      });
    }
    const records = new TraceToMessages().adapt(spans);
    expect(records).toHaveLength(2);
    for (const record of records) {
      expect(record.messages).toEqual([
        { role: "user", content: "Weather in Paris?" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{ id: TOOL_CALL.id, type: "function", function: { name: TOOL_CALL.name, arguments: TOOL_CALL.arguments } }],
        },
      ]);
      expect(record.tools).toEqual([
        { type: "function", function: { name: TOOL_CALL.name, description: "Weather", parameters: { type: "object" } } },
      ]);
    }
  });

  it("marks a refused call ERROR and hands the caller the SDK's own error", async () => {
    const ask = { model: "script-error", messages: [{ role: "user" as const, content: "hi" }] };
    const plain = await scriptedClient()
      .chat.completions.create(ask)
      .catch((e: unknown) => e);
    let seen: unknown;
    const spans = await traced(async () => {
      seen = await traceOpenAI(scriptedClient())
        .chat.completions.create(ask)
        .catch((e: unknown) => e);
    });
    expect(seen).toBeInstanceOf(OpenAI.BadRequestError);
    expect(seen).toMatchObject({ status: 400, message: (plain as Error).message, code: "model_not_found" });
    expect(spans).toHaveLength(1);
    expect(spans[0]!.status).toEqual({ status_code: "ERROR", description: (plain as Error).message });
    expect(spans[0]!.attributes).toMatchObject({
      "error.type": "400",
      "exception.type": "BadRequestError",
      "gen_ai.prompt.0.content": "hi",
    });
    expect(spans[0]!.events.map((e) => e.name)).toEqual(["exception"]);
  });

  it("marks a connection failure ERROR with error.type connection_error", async () => {
    const dead = new OpenAI({ baseURL: "http://127.0.0.1:9/v1", apiKey: "unused", maxRetries: 0 });
    let seen: unknown;
    const spans = await traced(async () => {
      seen = await traceOpenAI(dead)
        .chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] })
        .catch((e: unknown) => e);
    });
    expect(seen).toBeInstanceOf(OpenAI.APIConnectionError);
    expect(spans[0]!.status.status_code).toBe("ERROR");
    expect(spans[0]!.attributes["error.type"]).toBe("connection_error");
  });

  it("ends the span when the caller breaks out of a stream early, with what was read", async () => {
    let first = "";
    const spans = await traced(async () => {
      const stream = await traceOpenAI(scriptedClient()).chat.completions.create({
        model: "script-text",
        messages: [{ role: "user", content: "hi" }],
        stream: true,
      });
      for await (const chunk of stream) {
        first = chunk.choices[0]?.delta.content ?? "";
        break;
      }
    });
    expect(first).toBe(TEXT_PIECES[0]);
    expect(spans).toHaveLength(1);
    expect(spans[0]!.status.status_code).toBe("UNSET");
    expect(spans[0]!.attributes).toMatchObject({ [STREAM_ENDED_EARLY_ATTRIBUTE]: true, "gen_ai.completion.0.content": TEXT_PIECES[0] });
  });

  it("marks a stream that breaks ERROR, keeps what came before, and hands the caller the SDK's error", async () => {
    const read: string[] = [];
    let seen: unknown;
    const spans = await traced(async () => {
      const stream = await traceOpenAI(scriptedClient()).chat.completions.create({
        model: "script-broken",
        messages: [{ role: "user", content: "hi" }],
        stream: true,
      });
      try {
        for await (const chunk of stream) read.push(chunk.choices[0]?.delta.content ?? "");
      } catch (err) {
        seen = err;
      }
    });
    expect(read).toEqual([TEXT_PIECES[0]]);
    expect(seen).toBeInstanceOf(OpenAI.APIError);
    expect((seen as Error).message).toContain("the upstream died");
    expect(spans[0]!.status).toEqual({ status_code: "ERROR", description: (seen as Error).message });
    expect(spans[0]!.attributes["gen_ai.completion.0.content"]).toBe(TEXT_PIECES[0]);
  });

  it("returnTokenIds asks the server for token ids without changing the caller's body", async () => {
    const ask = { model: "script-text", messages: [{ role: "user" as const, content: "hi" }] };
    const before = upstream.bodies.length;
    const spans = await traced(async () => {
      await traceOpenAI(scriptedClient()).chat.completions.create(ask);
      await traceOpenAI(scriptedClient(), { returnTokenIds: true }).chat.completions.create(ask);
    });
    expect(ask).toEqual({ model: "script-text", messages: [{ role: "user", content: "hi" }] });
    expect(upstream.bodies.slice(before).map((b) => b.return_token_ids)).toEqual([undefined, true]);
    const triplets = new TracerTraceToTriplet().adapt(spans);
    expect(triplets.map((t) => [t.prompt.token_ids, t.response.token_ids])).toEqual([
      [[], []],
      [PROMPT_IDS, TEXT_IDS.flat()],
    ]);
  });

  it("keeps withResponse(), parse() and the stream() helper working, one span per request", async () => {
    const ask = { model: "script-text", messages: [{ role: "user" as const, content: "hi" }] };
    const client = traceOpenAI(scriptedClient());
    const spans = await traced(async () => {
      const { data, response } = await client.chat.completions.create(ask).withResponse();
      expect(data.choices[0]!.message.content).toBe(TEXT_PIECES.join(""));
      expect(response.status).toBe(200);
      const parsed = await client.chat.completions.parse(ask);
      expect(parsed.choices[0]!.message.content).toBe(TEXT_PIECES.join(""));
      const final = await client.chat.completions.stream(ask).finalChatCompletion();
      expect(final.choices[0]!.message.content).toBe(TEXT_PIECES.join(""));
    });
    expect(spans.map((s) => [s.name, s.attributes["gen_ai.completion.0.content"]])).toEqual(
      Array.from({ length: 3 }, () => [OPENAI_CHAT_SPAN_NAME, TEXT_PIECES.join("")]),
    );
  });

  it("is idempotent: wrapping twice, or a client of an instrumented class, records one span per call", async () => {
    const client = traceOpenAI(traceOpenAI(scriptedClient()));
    class Patched extends OpenAI {}
    const originals = [OpenAI.Chat.Completions.prototype.create, OpenAI.Completions.prototype.create] as const;
    instrumentOpenAI(OpenAI);
    try {
      const spans = await traced(async () => {
        await client.chat.completions.create({ model: "script-text", messages: [{ role: "user", content: "a" }] });
        const viaClass = traceOpenAI(new Patched({ baseURL: upstream.baseURL, apiKey: "unused", maxRetries: 0 }));
        await viaClass.chat.completions.create({ model: "script-text", messages: [{ role: "user", content: "b" }] });
      });
      // The first client's wrapper holds the method it replaced, so the instrumented prototype adds nothing.
      expect(spans.map((s) => s.attributes["gen_ai.prompt.0.content"])).toEqual(["a", "b"]);
    } finally {
      OpenAI.Chat.Completions.prototype.create = originals[0];
      OpenAI.Completions.prototype.create = originals[1];
    }
  });

  it("answers the same outside any rollout (nothing to store the span in)", async () => {
    const res = await traceOpenAI(scriptedClient()).chat.completions.create({
      model: "script-text",
      messages: [{ role: "user", content: "hi" }],
    });
    expect(res.choices[0]!.message.content).toBe(TEXT_PIECES.join(""));
  });

  it("refuses what is not an openai client", () => {
    expect(() => traceOpenAI({} as never)).toThrow(ValidationError);
    expect(() => instrumentOpenAI({} as never)).toThrow(/OpenAI.Chat.Completions/);
  });
});
