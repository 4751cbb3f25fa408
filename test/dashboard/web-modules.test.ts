/** The dashboard's browser modules that need no DOM, run here: the span tree, LLM-call and reward reading, the line diff, training series. */
import { describe, expect, it } from "vitest";
// @ts-expect-error: plain browser ES modules without type declarations
import { diffLines } from "../../src/server/dashboard/web/diff.js";
// @ts-expect-error: as above
import { fmtStat, pretty } from "../../src/server/dashboard/web/format.js";
// @ts-expect-error: as above
import { llmCall, rewardValues, timeRange, toolCalls, treeRows } from "../../src/server/dashboard/web/spans.js";

const span = (span_id: string, parent_id: string | null, start: number, end: number, extra: Record<string, unknown> = {}) => ({
  span_id,
  parent_id,
  name: span_id,
  start_time: start,
  end_time: end,
  sequence_id: 0,
  attributes: {},
  ...extra,
});

describe("treeRows", () => {
  it("orders depth-first with children by start time; a missing parent makes a root; collapsed ids hide their subtree", () => {
    const spans = [
      span("c2", "root", 3, 4),
      span("root", null, 0, 10),
      span("c1", "root", 1, 2),
      span("g1", "c1", 1.5, 1.6),
      span("orphan", "gone", 5, 6),
    ];
    const rows = (collapsed?: Set<string>) =>
      treeRows(spans, collapsed).map((r: { span: { span_id: string }; depth: number; children: number }) => [
        r.span.span_id,
        r.depth,
        r.children,
      ]);
    expect(rows()).toEqual([
      ["root", 0, 2],
      ["c1", 1, 1],
      ["g1", 2, 0],
      ["c2", 1, 0],
      ["orphan", 0, 0],
    ]);
    expect(rows(new Set(["c1"]))).toEqual([
      ["root", 0, 2],
      ["c1", 1, 1],
      ["c2", 1, 0],
      ["orphan", 0, 0],
    ]);
  });

  it("survives a parent cycle and a 5,000-deep chain", () => {
    const loop = treeRows([span("a", "b", 0, 1), span("b", "a", 0.5, 1)]);
    expect(loop.map((r: { span: { span_id: string }; depth: number }) => [r.span.span_id, r.depth])).toEqual([
      ["a", 0],
      ["b", 1],
    ]);
    const chain = Array.from({ length: 5000 }, (_, i) => span(`s${i}`, i === 0 ? null : `s${i - 1}`, i, i + 1));
    const rows = treeRows(chain);
    expect(rows).toHaveLength(5000);
    expect(rows[4999].depth).toBe(4999);
    expect(timeRange(chain)).toEqual({ start: 0, end: 5000 });
  });
});

describe("span readers", () => {
  it("reads an LLM call's messages and token counts, and reward dimensions", () => {
    const call = llmCall(
      span("x", null, 0, 1, {
        attributes: {
          "gen_ai.prompt.1.role": "user",
          "gen_ai.prompt.1.content": "second",
          "gen_ai.prompt.0.role": "system",
          "gen_ai.prompt.0.content": "first",
          "gen_ai.completion.0.content": "answer",
          "gen_ai.usage.input_tokens": 7,
          "gen_ai.usage.output_tokens": 2,
          "gen_ai.request.model": "m",
        },
      }),
    );
    expect(call).toEqual({
      model: "m",
      prompt: [
        { role: "system", content: "first" },
        { role: "user", content: "second" },
      ],
      completion: [{ content: "answer" }],
      promptTokens: 7,
      completionTokens: 2,
    });
    expect(
      rewardValues(
        span("r", null, 0, 0, {
          attributes: {
            "agentlightning.reward.0.name": "task",
            "agentlightning.reward.0.value": 1,
            "agentlightning.reward.1.name": "style",
            "agentlightning.reward.1.value": 0.5,
          },
        }),
      ),
    ).toEqual([
      { name: "task", value: 1 },
      { name: "style", value: 0.5 },
    ]);
  });
});

describe("toolCalls", () => {
  it("reads an assistant message's tool calls in order, and none from a message without them", () => {
    const call = llmCall(
      span("x", null, 0, 1, {
        attributes: {
          "gen_ai.prompt.0.role": "assistant",
          "gen_ai.prompt.0.tool_calls.1.name": "calculator",
          "gen_ai.prompt.0.tool_calls.1.arguments": '{"expression":"2*3"}',
          "gen_ai.prompt.0.tool_calls.1.id": "call_b",
          "gen_ai.prompt.0.tool_calls.0.name": "search",
          "gen_ai.prompt.0.tool_calls.0.id": "call_a",
          "gen_ai.prompt.1.role": "tool",
          "gen_ai.prompt.1.tool_call_id": "call_a",
          "gen_ai.prompt.1.content": "found",
        },
      }),
    );
    expect(toolCalls(call.prompt[0])).toEqual([
      { name: "search", id: "call_a" },
      { name: "calculator", arguments: '{"expression":"2*3"}', id: "call_b" },
    ]);
    expect(toolCalls(call.prompt[1])).toEqual([]);
  });
});

describe("span readers with keys named __proto__, constructor and prototype", () => {
  it("keeps them as fields of a message or a reward, and leaves the prototypes alone", () => {
    const attributes = JSON.parse(
      '{"gen_ai.prompt.0.__proto__":["evil"],"gen_ai.prompt.0.role":"user","gen_ai.prompt.0.constructor":"c",' +
        '"gen_ai.completion.0.prototype":[1],"agentlightning.reward.0.__proto__":{"name":"fake"},"agentlightning.reward.0.value":2}',
    );
    const call = llmCall(span("x", null, 0, 1, { attributes }));
    expect(JSON.stringify(call.prompt)).toBe('[{"__proto__":["evil"],"role":"user","constructor":"c"}]');
    expect(Object.getPrototypeOf(call.prompt[0])).toBe(Object.prototype);
    expect(JSON.stringify(call.completion)).toBe('[{"prototype":[1]}]');
    // A `__proto__` field is not where a reward's name comes from.
    expect(rewardValues(span("r", null, 0, 0, { attributes }))).toEqual([{ name: "reward", value: 2 }]);
    expect(({} as Record<string, unknown>).name).toBeUndefined();
  });
});

describe("diffLines", () => {
  it("keeps common lines and marks removed and added ones", () => {
    expect(diffLines("a\nb\nc\nd", "a\nc\nx\nd")).toEqual([
      { op: " ", line: "a" },
      { op: "-", line: "b" },
      { op: " ", line: "c" },
      { op: "+", line: "x" },
      { op: " ", line: "d" },
    ]);
    expect(diffLines("same", "same")).toEqual([{ op: " ", line: "same" }]);
  });
});

describe("format", () => {
  it("pretty keeps a list of numbers on one line and indents the rest as JSON does", () => {
    const value = { prompt: { token_ids: [11, 12, 13], raw: [{ a: 1 }] }, empty: [], none: {}, text: "x" };
    expect(pretty(value)).toBe(
      '{\n  "prompt": {\n    "token_ids": [11, 12, 13],\n    "raw": [\n      {\n        "a": 1\n      }\n    ]\n  },\n  "empty": [],\n  "none": {},\n  "text": "x"\n}',
    );
    expect(JSON.parse(pretty(value))).toEqual(value);
    expect(pretty("plain")).toBe("plain");
  });

  it("fmtStat reads the unit from the key: GB and MB as given, bytes scaled, percentages", () => {
    expect(fmtStat("mem_total_gb", 2.5)).toBe("2.5 GB");
    expect(fmtStat("bytes_sent_mb", 12)).toBe("12 MB");
    expect(fmtStat("memory_capacity_bytes", 2 * 1024 ** 3)).toBe("2.0 GB");
    expect(fmtStat("mem_pct", 41.25)).toBe("41.25 %");
    expect(fmtStat("total_rollouts", 1234)).toBe("1,234");
    expect(fmtStat("host", "box")).toBe("box");
  });
});
