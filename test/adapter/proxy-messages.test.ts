import { describe, expect, it } from "vitest";
import { LlmProxyTraceToTriplet, parsePythonLiteral, TraceToMessages, groupGenai } from "../../src/adapter/index.ts";
import { ValidationError } from "../../src/types/errors.ts";
import { sp } from "./spans.ts";

describe("Python literal parser", () => {
  it("parses lists, tuples, dicts, quoted strings, numbers and True/False/None", () => {
    expect(parsePythonLiteral("[1, 2, -3]")).toEqual([1, 2, -3]);
    expect(parsePythonLiteral("[[1,2]]")).toEqual([[1, 2]]);
    expect(parsePythonLiteral("[{'token_ids': [1, 2], 'logprobs': None}]")).toEqual([{ token_ids: [1, 2], logprobs: null }]);
    expect(parsePythonLiteral("(1, 2.5e1, True, False, 'it\\'s', \"q\\n\",)")).toEqual([1, 25, true, false, "it's", "q\n"]);
    expect(parsePythonLiteral("  { 'a' : ( ) , } ")).toEqual({ a: [] });
  });
  it("returns the input unchanged when it is not a literal, and passes non-strings through", () => {
    expect(parsePythonLiteral("[1, 2")).toBe("[1, 2");
    expect(parsePythonLiteral("hello")).toBe("hello");
    expect(parsePythonLiteral("[1] trailing")).toBe("[1] trailing");
    const arr = [1, 2];
    expect(parsePythonLiteral(arr)).toBe(arr);
  });
  it("keeps dict keys named __proto__, constructor and prototype as own keys, not as the dict's prototype", () => {
    const v = parsePythonLiteral("[{'__proto__': {'token_ids': [7]}, 'constructor': 1, 'prototype': [2]}]") as Record<string, unknown>[];
    expect(JSON.stringify(v)).toBe('[{"__proto__":{"token_ids":[7]},"constructor":1,"prototype":[2]}]');
    expect(Object.getPrototypeOf(v[0])).toBe(Object.prototype);
    expect(v[0]!.token_ids).toBeUndefined();
  });
});

describe("LlmProxyTraceToTriplet (docs/adapters.md#llmproxytracetotriplet)", () => {
  const req = (id: string, seq: number, attrs: Record<string, string | number[]>, name = "raw_gen_ai_request", start = 0) =>
    sp({ id, name, seq, start, end: start, attrs });

  it("orders by sequence id, reads vLLM and LiteLLM token ids (arrays or Python strings), dedups request ids", () => {
    const spans = [
      req("c", 3, { prompt_token_ids: [5], response_token_ids: "[6, 7]", "gen_ai.response.id": "r2" }, "litellm_request"),
      req("a", 1, {
        "llm.hosted_vllm.prompt_token_ids": "[1, 2]",
        "llm.hosted_vllm.response_token_ids": "[[3, 4]]",
        "llm.hosted_vllm.id": "r1",
      }),
      req("b", 2, {
        "llm.hosted_vllm.prompt_token_ids": [1, 2],
        "llm.hosted_vllm.choices": "[{'token_ids': [9], 'logprobs': None}]",
        "gen_ai.response.id": "r1",
      }),
      req("d", 4, { prompt_token_ids: [1], response_token_ids: [] }, "litellm_request"), // empty response: no item
      req("e", 5, { prompt_token_ids: [1], response_token_ids: [2] }, "something_else"),
    ];
    const out = new LlmProxyTraceToTriplet().adapt(spans);
    expect(out.map((t) => [t.prompt.token_ids, t.response.token_ids, t.metadata.response_id])).toEqual([
      [[1, 2], [3, 4], "r1"],
      [[5], [6, 7], "r2"],
    ]);
  });

  it("gives each reward to the latest unrewarded item with a smaller sequence id; rewards with none are dropped", () => {
    const call = (id: string, seq: number) => req(id, seq, { prompt_token_ids: [1], response_token_ids: [2] }, "litellm_request");
    const rew = (id: string, seq: number, v: number) =>
      sp({
        id,
        seq,
        name: "agentlightning.annotation",
        attrs: { "agentlightning.reward.0.name": "p", "agentlightning.reward.0.value": v },
      });
    const out = new LlmProxyTraceToTriplet().adapt([
      rew("r0", 1, 9),
      call("a", 2),
      call("b", 3),
      rew("r1", 4, 0.5),
      rew("r2", 5, 0.7),
      rew("r3", 6, 0.1),
    ]);
    expect(out.map((t) => t.reward)).toEqual([0.7, 0.5]);
    // equal sequence ids do not count as "before"
    const same = new LlmProxyTraceToTriplet().adapt([call("a", 2), rew("r", 2, 1)]);
    expect(same.map((t) => t.reward)).toEqual([null]);
  });
});

describe("TraceToMessages (docs/adapters.md#tracetomessages)", () => {
  it("groupGenai keeps keys named __proto__, constructor and prototype as own keys at every level", () => {
    const attrs = JSON.parse(
      '{"p.__proto__":[1],"p.a.__proto__":["x"],"p.a.constructor.prototype":2,"p.b.prototype.__proto__.c":3,"q.0.__proto__":[4]}',
    ) as Record<string, unknown>;
    const p = groupGenai(attrs, "p");
    expect(JSON.stringify(p)).toBe(
      '{"__proto__":[1],"a":{"__proto__":["x"],"constructor":{"prototype":2}},"b":{"prototype":{"__proto__":{"c":3}}}}',
    );
    expect(Object.getPrototypeOf(p)).toBe(Object.prototype);
    expect(JSON.stringify(groupGenai(attrs, "q"))).toBe('[{"__proto__":[4]}]');
  });

  it("regroups gen_ai attributes into lists and dicts", () => {
    expect(
      groupGenai({ "gen_ai.prompt.1.role": "user", "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "s" }, "gen_ai.prompt"),
    ).toEqual([{ role: "system", content: "s" }, { role: "user" }]);
    expect(groupGenai({ "gen_ai.request.model": "m", "gen_ai.request.functions.0.name": "f" }, "gen_ai.request")).toEqual({
      model: "m",
      functions: [{ name: "f" }],
    });
  });

  it("builds chat records with tool calls from prompt items and from tool child spans, and tool definitions", () => {
    const spans = [
      sp({
        id: "call",
        attrs: {
          "gen_ai.prompt.0.role": "system",
          "gen_ai.prompt.0.content": "be brief",
          "gen_ai.prompt.1.role": "user",
          "gen_ai.prompt.1.content": "weather?",
          "gen_ai.prompt.2.role": "assistant",
          "gen_ai.prompt.2.tool_calls.0.id": "c0",
          "gen_ai.prompt.2.tool_calls.0.name": "lookup",
          "gen_ai.prompt.2.tool_calls.0.arguments": '{"q":1}',
          "gen_ai.prompt.3.role": "tool",
          "gen_ai.prompt.3.content": "sunny",
          "gen_ai.prompt.3.tool_call_id": "c0",
          "gen_ai.completion.0.role": "assistant",
          "gen_ai.request.functions.0.name": "lookup",
          "gen_ai.request.functions.0.description": "find",
          "gen_ai.request.functions.0.parameters": '{"type":"object"}',
        },
      }),
      sp({
        id: "tool",
        parent: "call",
        attrs: { "tool.name": "lookup", "tool.parameters": '{"q":2}', "tool.call.id": "c1", "tool.call.type": "function" },
      }),
      sp({ id: "empty" }),
    ];
    const out = new TraceToMessages().adapt(spans);
    expect(out).toHaveLength(1);
    expect(out[0].messages).toEqual([
      { role: "system", content: "be brief" },
      { role: "user", content: "weather?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c0", type: "function", function: { name: "lookup", arguments: '{"q":1}' } }],
      },
      { role: "tool", content: "sunny", tool_call_id: "c0" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c1", type: "function", function: { name: "lookup", arguments: '{"q":2}' } }],
      },
    ]);
    expect(out[0].tools).toEqual([{ type: "function", function: { name: "lookup", description: "find", parameters: { type: "object" } } }]);
  });

  it("rejects invalid messages: a tool message without tool_call_id, an unknown role", () => {
    expect(() =>
      new TraceToMessages().adapt([sp({ id: "a", attrs: { "gen_ai.prompt.0.role": "tool", "gen_ai.prompt.0.content": "x" } })]),
    ).toThrow(ValidationError);
    expect(() => new TraceToMessages().adapt([sp({ id: "a", attrs: { "gen_ai.prompt.0.role": "wizard" } })])).toThrow(ValidationError);
    expect(() => new TraceToMessages().adapt([sp({ id: "a", attrs: { "gen_ai.prompt.role": "user" } })])).toThrow(ValidationError);
  });
});
