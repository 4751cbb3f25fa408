import { describe, expect, it } from "vitest";
import { LlmProxyTraceToTriplet, TraceToMessages } from "../../src/adapter/index.ts";
import { assembleStream, openAiCallAttributes } from "../../src/tracer/gen-ai.ts";
import { sp } from "../adapter/spans.ts";

const tools = [
  {
    type: "function",
    function: { name: "add", description: "adds two numbers", parameters: { type: "object", properties: { a: { type: "number" } } } },
  },
];

const toolCallRequest = {
  model: "m",
  temperature: 0.5,
  max_completion_tokens: 64,
  tools,
  messages: [
    { role: "system", content: "be brief" },
    {
      role: "user",
      content: [
        { type: "text", text: "2+" },
        { type: "text", text: "3?" },
      ],
    },
    { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "add", arguments: '{"a":2}' } }] },
    { role: "tool", tool_call_id: "c1", content: "5" },
  ],
};

const toolCallResponse = {
  id: "chatcmpl-1",
  object: "chat.completion",
  model: "m-served",
  prompt_token_ids: [1, 2, 3],
  choices: [
    {
      index: 0,
      finish_reason: "tool_calls",
      token_ids: [7, 8],
      message: {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c2", type: "function", function: { name: "add", arguments: '{"a":5}' } }],
      },
    },
  ],
  usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
};

describe("openAiCallAttributes", () => {
  it("records messages, tool calls, tools, usage and vLLM token ids in the shape the adapters read", () => {
    const attrs = openAiCallAttributes({ request: toolCallRequest, response: toolCallResponse });
    expect(attrs).toMatchObject({
      "gen_ai.operation.name": "chat",
      "gen_ai.request.model": "m",
      "gen_ai.request.max_tokens": 64,
      "gen_ai.prompt.1.content": "2+3?",
      "gen_ai.prompt.2.tool_calls.0.name": "add",
      "gen_ai.prompt.3.tool_call_id": "c1",
      "gen_ai.request.functions.0.parameters": JSON.stringify(tools[0]!.function.parameters),
      "gen_ai.response.id": "chatcmpl-1",
      "gen_ai.response.model": "m-served",
      "gen_ai.completion.0.finish_reason": "tool_calls",
      "gen_ai.completion.0.tool_calls.0.id": "c2",
      "gen_ai.completion.0.tool_calls.0.arguments": '{"a":5}',
      "gen_ai.usage.total_tokens": 5,
      prompt_token_ids: [1, 2, 3],
      response_token_ids: [7, 8],
    });
    expect("gen_ai.completion.0.content" in attrs).toBe(false);

    const span = sp({ id: "s", name: "litellm_request", seq: 1, attrs });
    const [record] = new TraceToMessages().adapt([span]);
    expect(record!.messages).toEqual([
      { role: "system", content: "be brief" },
      { role: "user", content: "2+3?" },
      { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "add", arguments: '{"a":2}' } }] },
      { role: "tool", content: "5", tool_call_id: "c1" },
      { role: "assistant", content: null, tool_calls: [{ id: "c2", type: "function", function: { name: "add", arguments: '{"a":5}' } }] },
    ]);
    expect(record!.tools).toEqual(tools);
    const [triplet] = new LlmProxyTraceToTriplet().adapt([span]);
    expect(triplet!.prompt.token_ids).toEqual([1, 2, 3]);
    expect(triplet!.response.token_ids).toEqual([7, 8]);
  });

  it("records a text completion's prompt as one user message and a token-id prompt as token ids", () => {
    const text = openAiCallAttributes({
      request: { model: "m", prompt: "Once" },
      response: {
        id: "cmpl-1",
        choices: [{ index: 0, text: " upon", finish_reason: "length", provider_specific_fields: { token_ids: [4] } }],
      },
    });
    expect(text).toMatchObject({
      "gen_ai.operation.name": "text_completion",
      "gen_ai.prompt.0.role": "user",
      "gen_ai.prompt.0.content": "Once",
      "gen_ai.completion.0.role": "assistant",
      "gen_ai.completion.0.content": " upon",
      response_token_ids: [4],
    });
    const ids = openAiCallAttributes({ request: { model: "m", prompt: [9, 10] }, response: { choices: [{ text: "x", token_ids: [11] }] } });
    expect(ids.prompt_token_ids).toEqual([9, 10]);
    expect("gen_ai.prompt.0.content" in ids).toBe(false);
  });

  it("marks a failed call with its status, or connection_error when nothing answered", () => {
    const request = { model: "m", messages: [{ role: "user", content: "hi" }] };
    expect(openAiCallAttributes({ request, error: { status: 429, message: "slow down" } })["error.type"]).toBe("429");
    const down = openAiCallAttributes({ request, error: { status: null, message: "ECONNREFUSED" } });
    expect(down["error.type"]).toBe("connection_error");
    expect(down["gen_ai.prompt.0.content"]).toBe("hi");
    expect(Object.keys(down).some((k) => k.startsWith("gen_ai.completion"))).toBe(false);
  });
});

describe("assembleStream", () => {
  it("folds chat chunks into the unstreamed body: text, tool calls by index, finish reason, usage, token ids", () => {
    const chunks = [
      {
        id: "c",
        created: 1,
        model: "m",
        prompt_token_ids: [1, 2],
        choices: [{ index: 0, delta: { role: "assistant", content: "" }, token_ids: [] }],
      },
      { id: "c", choices: [{ index: 0, delta: { content: "Let me " }, token_ids: [5] }] },
      { id: "c", choices: [{ index: 0, delta: { content: "add." }, token_ids: [6] }] },
      {
        id: "c",
        choices: [
          { index: 0, delta: { tool_calls: [{ index: 0, id: "t1", type: "function", function: { name: "add", arguments: '{"a"' } }] } },
        ],
      },
      { id: "c", choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: ":1}" } }] }, token_ids: [7] }] },
      { id: "c", choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] },
      { id: "c", choices: [], usage: { prompt_tokens: 2, completion_tokens: 3, total_tokens: 5 } },
    ];
    expect(assembleStream(chunks)).toEqual({
      id: "c",
      created: 1,
      model: "m",
      object: "chat.completion",
      prompt_token_ids: [1, 2],
      usage: { prompt_tokens: 2, completion_tokens: 3, total_tokens: 5 },
      choices: [
        {
          index: 0,
          finish_reason: "tool_calls",
          token_ids: [5, 6, 7],
          message: {
            role: "assistant",
            content: "Let me add.",
            tool_calls: [{ id: "t1", type: "function", function: { name: "add", arguments: '{"a":1}' } }],
          },
        },
      ],
    });
  });

  it("folds streamed text completions and keeps choices apart", () => {
    const body = assembleStream([
      { id: "x", choices: [{ index: 1, text: "b" }] },
      { id: "x", choices: [{ index: 0, text: "a" }] },
      { id: "x", choices: [{ index: 0, text: "c", finish_reason: "stop" }] },
    ]);
    expect(body.object).toBe("text_completion");
    expect(body.choices).toEqual([
      { index: 0, text: "ac", finish_reason: "stop" },
      { index: 1, text: "b", finish_reason: null },
    ]);
  });
});
