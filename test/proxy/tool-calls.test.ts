import { describe, expect, it } from "vitest";
import { parseToolCalls } from "../../src/proxy/tool-calls.ts";

describe("parseToolCalls", () => {
  it("hermes: one call, several calls, text around them, unicode arguments", () => {
    const one = parseToolCalls('<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>', "hermes");
    expect(one.content).toBeNull();
    expect(one.toolCalls.map((c) => [c.function.name, JSON.parse(c.function.arguments)])).toEqual([["add", { a: 1, b: 2 }]]);
    const two = parseToolCalls(
      'Let me check.\n<tool_call>\n{"name": "weather", "arguments": {"city": "Zürich 🌧"}}\n</tool_call>\n<tool_call>{"name": "time", "arguments": {}}</tool_call>\nDone.',
      "hermes",
    );
    expect(two.content).toBe("Let me check.\n\n\nDone.");
    expect(two.toolCalls.map((c) => c.function.name)).toEqual(["weather", "time"]);
    expect(JSON.parse(two.toolCalls[0].function.arguments)).toEqual({ city: "Zürich 🌧" });
    expect(new Set(two.toolCalls.map((c) => c.id)).size).toBe(2);
    for (const c of two.toolCalls) expect(c).toMatchObject({ type: "function", id: expect.stringMatching(/^call_/) });
  });

  it("hermes: malformed calls stay in the content, never dropped", () => {
    const text = 'Sure <tool_call>\n{"name": "add", "arguments": {"a": 1,}\n</tool_call> and <tool_call>{"arguments": {}}</tool_call>';
    expect(parseToolCalls(text, "hermes")).toEqual({ content: text, toolCalls: [] });
    const mixed = parseToolCalls('<tool_call>{"name": "ok", "arguments": {}}</tool_call><tool_call>{broken</tool_call>', "hermes");
    expect(mixed.toolCalls.map((c) => c.function.name)).toEqual(["ok"]);
    expect(mixed.content).toBe("<tool_call>{broken</tool_call>");
    const unclosed = '<tool_call>\n{"name": "add", "arguments": {}}';
    expect(parseToolCalls(unclosed, "hermes")).toEqual({ content: unclosed, toolCalls: [] });
  });

  it("llama3-json: the whole message, after <|python_tag|>, several separated by ;, and arguments given as a string", () => {
    const a = parseToolCalls('{"name": "search", "parameters": {"q": "rl"}}', "llama3-json");
    expect(a.content).toBeNull();
    expect(JSON.parse(a.toolCalls[0].function.arguments)).toEqual({ q: "rl" });
    const b = parseToolCalls('<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": 1}}', "llama3-json");
    expect(b.toolCalls.map((c) => c.function.name)).toEqual(["a", "b"]);
    const c = parseToolCalls('{"name": "s", "arguments": "{\\"q\\": 1}"}', "llama3-json");
    expect(c.toolCalls[0].function.arguments).toBe('{"q": 1}');
  });

  it("llama3-json: prose, JSON without a name and broken JSON stay content; no format parses nothing", () => {
    for (const text of ["The answer is 4.", '{"result": 4}', '{"name": "a", "parameters": {', 'Call {"name": "a", "parameters": {}}'])
      expect(parseToolCalls(text, "llama3-json")).toEqual({ content: text, toolCalls: [] });
    const hermesText = '<tool_call>{"name": "a", "arguments": {}}</tool_call>';
    expect(parseToolCalls(hermesText, null)).toEqual({ content: hermesText, toolCalls: [] });
  });
});

describe("parseToolCalls: hard cases", () => {
  it("hermes: an argument holding the closing tag, a malformed call before a good one, whitespace and a JSON-string argument", () => {
    const tricky = parseToolCalls(
      '<tool_call>\n{"name": "write", "arguments": {"text": "end with </tool_call> please"}}\n</tool_call> ok',
      "hermes",
    );
    expect(tricky.toolCalls.map((c) => JSON.parse(c.function.arguments))).toEqual([{ text: "end with </tool_call> please" }]);
    expect(tricky.content).toBe("ok");
    const after = parseToolCalls(
      '<tool_call>{oops</tool_call>\n<tool_call>{"name": "b", "arguments": {"n": [1, 2]}}</tool_call>',
      "hermes",
    );
    expect(after.toolCalls.map((c) => c.function.name)).toEqual(["b"]);
    expect(after.content).toBe("<tool_call>{oops</tool_call>");
    const spaced = parseToolCalls('<tool_call>  \n\t{"name":"s","arguments":"{\\"q\\":1}"}  \n</tool_call>', "hermes");
    expect(spaced.toolCalls[0].function.arguments).toBe('{"q":1}');
    // no arguments at all is a call with empty arguments; a name that is not a string is not a call
    expect(JSON.parse(parseToolCalls('<tool_call>{"name": "now"}</tool_call>', "hermes").toolCalls[0].function.arguments)).toEqual({});
    const badName = '<tool_call>{"name": 7, "arguments": {}}</tool_call>';
    expect(parseToolCalls(badName, "hermes")).toEqual({ content: badName, toolCalls: [] });
  });

  it("hermes: Qwen3's thinking before a call stays in the content; text with no call is returned untouched", () => {
    const r = parseToolCalls(
      '<think>\nI need the weather.\n</think>\n\n<tool_call>\n{"name": "w", "arguments": {}}\n</tool_call>',
      "hermes",
    );
    expect(r.content).toBe("<think>\nI need the weather.\n</think>");
    expect(r.toolCalls).toHaveLength(1);
    for (const text of ["", "  plain  ", "a </tool_call> b", "日本語 🌧"])
      expect(parseToolCalls(text, "hermes")).toEqual({ content: text, toolCalls: [] });
  });
});
