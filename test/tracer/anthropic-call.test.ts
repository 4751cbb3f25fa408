/** A Messages API call's span attributes: those of the OpenAI chat call it amounts to, read back by TraceToMessages. */
import { describe, expect, it } from "vitest";
import { TraceToMessages } from "../../src/adapter/index.ts";
import { anthropicCallAttributes, assembleMessageStream, messageAsChatCompletion } from "../../src/tracer/anthropic-call.ts";
import { sp } from "../adapter/spans.ts";

const weather = {
  name: "weather",
  description: "the weather in a city",
  input_schema: { type: "object", properties: { city: { type: "string" } } },
};

/** A second turn: the first answer's tool call and its result are in the conversation. */
const request = {
  model: "claude-x",
  max_tokens: 128,
  temperature: 0.2,
  system: [{ type: "text", text: "Be brief." }],
  tools: [weather],
  messages: [
    { role: "user", content: "Weather in Paris?" },
    {
      role: "assistant",
      content: [
        { type: "text", text: "Let me look." },
        { type: "tool_use", id: "toolu_1", name: "weather", input: { city: "Paris" } },
      ],
    },
    {
      role: "user",
      content: [
        { type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: "sunny" }] },
        { type: "text", text: "And so?" },
      ],
    },
  ],
};

const answer = {
  id: "msg_1",
  type: "message",
  role: "assistant",
  model: "claude-x-served",
  content: [{ type: "text", text: "Sunny in Paris." }],
  stop_reason: "end_turn",
  usage: { input_tokens: 20, cache_read_input_tokens: 100, output_tokens: 5 },
};

describe("anthropicCallAttributes", () => {
  it("records system, tool use, tool results, tools, usage and the stop reason as an OpenAI chat call's attributes", () => {
    const attrs = anthropicCallAttributes({ request, response: answer });
    expect(attrs).toMatchObject({
      "gen_ai.operation.name": "chat",
      "gen_ai.request.model": "claude-x",
      "gen_ai.request.max_tokens": 128,
      "gen_ai.request.temperature": 0.2,
      "gen_ai.prompt.0.role": "system",
      "gen_ai.prompt.0.content": "Be brief.",
      "gen_ai.prompt.1.content": "Weather in Paris?",
      "gen_ai.prompt.2.role": "assistant",
      "gen_ai.prompt.2.content": "Let me look.",
      "gen_ai.prompt.2.tool_calls.0.id": "toolu_1",
      "gen_ai.prompt.2.tool_calls.0.arguments": '{"city":"Paris"}',
      "gen_ai.prompt.3.role": "tool",
      "gen_ai.prompt.3.tool_call_id": "toolu_1",
      "gen_ai.prompt.3.content": "sunny",
      "gen_ai.prompt.4.role": "user",
      "gen_ai.prompt.4.content": "And so?",
      "gen_ai.request.functions.0.name": "weather",
      "gen_ai.response.id": "msg_1",
      "gen_ai.response.model": "claude-x-served",
      "gen_ai.completion.0.content": "Sunny in Paris.",
      "gen_ai.completion.0.finish_reason": "stop",
      // Cached input is part of the prompt.
      "gen_ai.usage.prompt_tokens": 120,
      "gen_ai.usage.completion_tokens": 5,
      "gen_ai.usage.total_tokens": 125,
    });

    const [record] = new TraceToMessages().adapt([sp({ id: "s1", attrs })]);
    expect(record.messages).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: "Weather in Paris?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "toolu_1", type: "function", function: { name: "weather", arguments: '{"city":"Paris"}' } }],
      },
      { role: "tool", content: "sunny", tool_call_id: "toolu_1" },
      { role: "user", content: "And so?" },
      { role: "assistant", content: "Sunny in Paris." },
    ]);
    expect(record.tools).toEqual([
      { type: "function", function: { name: "weather", description: weather.description, parameters: weather.input_schema } },
    ]);
  });

  it("keeps blocks that are not text (thinking, images) as the JSON of the content", () => {
    const thinking = { type: "thinking", thinking: "hmm", signature: "sig" };
    const completion = messageAsChatCompletion({ ...answer, content: [thinking, { type: "text", text: "Hi" }] });
    const content = (completion.choices as { message: { content: string } }[])[0].message.content;
    expect(JSON.parse(content)).toEqual([thinking, { type: "text", text: "Hi" }]);
  });

  it("maps a tool-use answer to tool calls with the finish reason tool_calls", () => {
    const attrs = anthropicCallAttributes({
      request: { model: "m", messages: [{ role: "user", content: "hi" }] },
      response: {
        ...answer,
        content: [{ type: "tool_use", id: "toolu_2", name: "weather", input: { city: "Oslo" } }],
        stop_reason: "tool_use",
      },
    });
    expect(attrs["gen_ai.completion.0.finish_reason"]).toBe("tool_calls");
    expect(attrs["gen_ai.completion.0.tool_calls.0.name"]).toBe("weather");
    expect(attrs["gen_ai.completion.0.tool_calls.0.arguments"]).toBe('{"city":"Oslo"}');
    expect(attrs["gen_ai.completion.0.content"]).toBeUndefined();
  });
});

describe("assembleMessageStream", () => {
  it("folds the events into the unstreamed message: text joined, tool input parsed from its pieces, stop reason and usage", () => {
    const { message, error } = assembleMessageStream([
      {
        type: "message_start",
        message: { id: "msg_s", type: "message", role: "assistant", model: "m", content: [], usage: { input_tokens: 9, output_tokens: 1 } },
      },
      { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
      { type: "ping" },
      { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Checking" } },
      { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: " now." } },
      { type: "content_block_stop", index: 0 },
      { type: "content_block_start", index: 1, content_block: { type: "tool_use", id: "toolu_s", name: "weather", input: {} } },
      { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: '{"city": "Ro' } },
      { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: 'me"}' } },
      { type: "content_block_stop", index: 1 },
      { type: "message_delta", delta: { stop_reason: "tool_use", stop_sequence: null }, usage: { output_tokens: 12 } },
      { type: "message_stop" },
    ]);
    expect(error).toBeNull();
    expect(message).toEqual({
      id: "msg_s",
      type: "message",
      role: "assistant",
      model: "m",
      content: [
        { type: "text", text: "Checking now." },
        { type: "tool_use", id: "toolu_s", name: "weather", input: { city: "Rome" } },
      ],
      stop_reason: "tool_use",
      stop_sequence: null,
      usage: { input_tokens: 9, output_tokens: 12 },
    });
  });

  it("returns an error event's error, and keeps a tool input cut short as its text", () => {
    const { message, error } = assembleMessageStream([
      { type: "message_start", message: { id: "msg_e", content: [] } },
      { type: "content_block_start", index: 0, content_block: { type: "tool_use", id: "t", name: "weather", input: {} } },
      { type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json: '{"city": "Li' } },
      { type: "error", error: { type: "overloaded_error", message: "Overloaded" } },
    ]);
    expect(error).toEqual({ type: "overloaded_error", message: "Overloaded" });
    expect(message?.content).toEqual([{ type: "tool_use", id: "t", name: "weather", input: '{"city": "Li' }]);
  });
});
