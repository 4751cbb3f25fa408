/**
 * GenAI semantic-convention LLM-call spans (what OpenTelemetry's GenAI instrumentations record, e.g.
 * @opentelemetry/instrumentation-openai): recognised by `gen_ai.operation.name`, usage under either key
 * generation, messages from the JSON attributes when the indexed gen_ai.prompt/completion keys are absent.
 */
import { describe, expect, it } from "vitest";
import { TraceToMessages, TraceTripletAdapter, tokenUsage } from "../../src/adapter/index.ts";
import { ValidationError } from "../../src/types/errors.ts";
import { reward, sp } from "./spans.ts";

/** A chat span as @opentelemetry/instrumentation-openai 0.21 records it (content goes to log events, not here). */
const instrumented = (id: string, start: number, end: number, extra: Record<string, string | number | string[]> = {}) =>
  sp({
    id,
    parent: "root",
    name: "chat gpt-4o-mini",
    start,
    end,
    attrs: {
      "gen_ai.operation.name": "chat",
      "gen_ai.request.model": "gpt-4o-mini",
      "gen_ai.system": "openai",
      "gen_ai.response.id": `chatcmpl-${id}`,
      "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
      "gen_ai.response.finish_reasons": ["stop"],
      "gen_ai.usage.input_tokens": 12,
      "gen_ai.usage.output_tokens": 5,
      ...extra,
    },
  });

const INPUT = JSON.stringify([
  { role: "user", parts: [{ type: "text", content: "Weather in Paris?" }] },
  { role: "assistant", parts: [{ type: "tool_call", id: "call_1", name: "get_weather", arguments: { city: "Paris" } }] },
  { role: "tool", parts: [{ type: "tool_call_response", id: "call_1", response: "rainy, 14 C" }] },
]);
const OUTPUT = JSON.stringify([{ role: "assistant", parts: [{ type: "text", content: "It rains in Paris." }], finish_reason: "stop" }]);

describe("GenAI semantic-convention spans", () => {
  it("count as LLM calls by gen_ai.operation.name whatever their name; other operations and matchGenAiOperations: false do not", () => {
    const spans = [
      sp({ id: "root", start: 0, end: 10 }),
      instrumented("a", 1, 2),
      instrumented("e", 3, 4, { "gen_ai.operation.name": "embeddings" }),
      instrumented("t", 5, 6, { "gen_ai.operation.name": "text_completion" }),
      reward("r", "root", 7, 0.5),
    ];
    const out = new TraceTripletAdapter().adapt(spans);
    expect(out.map((t) => t.metadata.response_id)).toEqual(["chatcmpl-a", "chatcmpl-t"]);
    expect(out.map((t) => t.reward)).toEqual([null, 0.5]);
    expect(new TraceTripletAdapter({ matchGenAiOperations: false }).adapt(spans)).toEqual([]);
  });

  it("do not count twice when a name match and the operation both apply, nor when two instrumentations record one call", () => {
    const spans = [
      sp({ id: "root", start: 0, end: 10 }),
      sp({
        id: "ours",
        parent: "root",
        name: "openai.chat.completion",
        start: 1,
        end: 5,
        attrs: { "gen_ai.operation.name": "chat", "gen_ai.response.id": "x" },
      }),
      instrumented("theirs", 2, 4, { "gen_ai.response.id": "x" }),
    ];
    spans[2]!.parent_id = "ours";
    expect(new TraceTripletAdapter().adapt(spans).map((t) => t.metadata.response_id)).toEqual(["x"]);
  });

  it("give token usage from input/output or prompt/completion keys in the triplet metadata", () => {
    expect(tokenUsage({ "gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 5 })).toEqual({
      prompt_tokens: 12,
      completion_tokens: 5,
    });
    expect(tokenUsage({ "gen_ai.usage.prompt_tokens": 3, "gen_ai.usage.completion_tokens": 4, "gen_ai.usage.input_tokens": 9 })).toEqual({
      prompt_tokens: 3,
      completion_tokens: 4,
    });
    expect(tokenUsage({ "gen_ai.usage.output_tokens": 2 })).toEqual({ prompt_tokens: null, completion_tokens: 2 });
    expect(tokenUsage({ "gen_ai.request.model": "m" })).toBeNull();
    const [t] = new TraceTripletAdapter().adapt([sp({ id: "root", start: 0, end: 9 }), instrumented("a", 1, 2)]);
    expect(t!.metadata).toEqual({
      request: { model: "gpt-4o-mini" },
      response: { id: "chatcmpl-a", model: "gpt-4o-mini-2024-07-18", finish_reasons: ["stop"] },
      response_id: "chatcmpl-a",
      agent_name: "*",
      usage: { prompt_tokens: 12, completion_tokens: 5 },
    });
    expect(t!.prompt.raw_content).toBeNull();
  });

  it("read messages from gen_ai.input.messages / gen_ai.output.messages (and system instructions, tool definitions)", () => {
    const span = instrumented("m", 1, 2, {
      "gen_ai.system_instructions": JSON.stringify([{ type: "text", content: "Be brief." }]),
      "gen_ai.input.messages": INPUT,
      "gen_ai.output.messages": OUTPUT,
      "gen_ai.tool.definitions": JSON.stringify([
        { type: "function", name: "get_weather", description: "Weather", parameters: { type: "object" } },
      ]),
    });
    const [t] = new TraceTripletAdapter().adapt([sp({ id: "root", start: 0, end: 9 }), span]);
    expect(t!.prompt.raw_content).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' }] },
      { role: "tool", content: "rainy, 14 C", tool_call_id: "call_1" },
    ]);
    expect(t!.response.raw_content).toEqual([{ role: "assistant", content: "It rains in Paris.", finish_reason: "stop" }]);
    expect(new TraceToMessages().adapt([span])).toEqual([
      {
        messages: [
          { role: "system", content: "Be brief." },
          { role: "user", content: "Weather in Paris?" },
          {
            role: "assistant",
            content: null,
            tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }],
          },
          { role: "tool", content: "rainy, 14 C", tool_call_id: "call_1" },
          { role: "assistant", content: "It rains in Paris." },
        ],
        tools: [{ type: "function", function: { name: "get_weather", description: "Weather", parameters: { type: "object" } } }],
      },
    ]);
  });

  it("prefer the indexed gen_ai.prompt / gen_ai.completion keys when both are present", () => {
    const span = instrumented("m", 1, 2, {
      "gen_ai.prompt.0.role": "user",
      "gen_ai.prompt.0.content": "indexed",
      "gen_ai.input.messages": INPUT,
      "gen_ai.output.messages": OUTPUT,
    });
    const [record] = new TraceToMessages().adapt([span]);
    expect(record!.messages).toEqual([
      { role: "user", content: "indexed" },
      { role: "assistant", content: "It rains in Paris." },
    ]);
  });

  it("turn image parts into image_url content parts, which the triplet's image_urls lists", () => {
    const span = instrumented("m", 1, 2, {
      "gen_ai.input.messages": JSON.stringify([
        {
          role: "user",
          parts: [
            { type: "text", content: "What is this?" },
            { type: "uri", modality: "image", uri: "https://img/1.png" },
            { type: "blob", modality: "image", mime_type: "image/png", content: "AAAA" },
            { type: "reasoning", content: "not a message part" },
          ],
        },
      ]),
    });
    const [t] = new TraceTripletAdapter().adapt([sp({ id: "root", start: 0, end: 9 }), span]);
    expect(t!.prompt.image_urls).toEqual(["https://img/1.png", "data:image/png;base64,AAAA"]);
    expect(t!.prompt.raw_content).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "What is this?" },
          { type: "image_url", image_url: { url: "https://img/1.png" } },
          { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } },
        ],
      },
    ]);
  });

  it("take messages without parts to be in OpenAI's shape", () => {
    const span = instrumented("m", 1, 2, {
      "gen_ai.input.messages": JSON.stringify([
        { role: "user", content: "Weather?" },
        { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "w", arguments: '{"x":1}' } }] },
        { role: "tool", tool_call_id: "c1", content: "sunny" },
      ]),
      "gen_ai.output.messages": JSON.stringify([{ role: "assistant", content: "Sunny." }]),
    });
    expect(new TraceToMessages().adapt([span])[0]!.messages).toEqual([
      { role: "user", content: "Weather?" },
      { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "w", arguments: '{"x":1}' } }] },
      { role: "tool", content: "sunny", tool_call_id: "c1" },
      { role: "assistant", content: "Sunny." },
    ]);
  });

  it("reject message attributes that are not JSON arrays, naming the attribute", () => {
    const bad = (v: string) => () => new TraceToMessages().adapt([instrumented("m", 1, 2, { "gen_ai.input.messages": v })]);
    expect(bad("[{")).toThrow(ValidationError);
    expect(bad("[{")).toThrow(/gen_ai\.input\.messages is not valid JSON/);
    expect(bad('{"role":"user"}')).toThrow(/gen_ai\.input\.messages must be a JSON array/);
    expect(bad("[1]")).toThrow(/a message must be an object/);
  });
});
