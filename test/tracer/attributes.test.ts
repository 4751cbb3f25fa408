import { describe, expect, it } from "vitest";
import {
  captureLogs,
  checkAttributesSanity,
  flatten,
  formatExceptionAttributes,
  makeLinkAttributes,
  makeTagAttributes,
  queryLinkedSpans,
  sanitizeAttributes,
  sanitizeValue,
} from "../../src/tracer/index.ts";
import { filterAndUnflatten, spanFromAttributes, ValidationError } from "../../src/types/index.ts";

describe("flatten", () => {
  it("joins nested keys with dots and keeps homogeneous primitive lists as leaves", () => {
    expect(flatten({ a: { b: 1, c: [2, 3] } })).toEqual({ "a.b": 1, "a.c": [2, 3] });
    expect(flatten({ a: { b: 1, c: [2, 3] } }, true)).toEqual({ "a.b": 1, "a.c.0": 2, "a.c.1": 3 });
    expect(flatten([10, 20, 30])).toEqual({ "0": 10, "1": 20, "2": 30 });
  });

  it("expands lists of mixed primitive kinds with a warning, and lists of objects always", () => {
    const logs = captureLogs();
    expect(flatten({ values: [1, 2.5, 3] })).toEqual({ "values.0": 1, "values.1": 2.5, "values.2": 3 });
    logs.stop();
    expect(logs.text()).toContain("mixed primitive types");
    expect(flatten({ r: [{ name: "x", value: 1 }] })).toEqual({ "r.0.name": "x", "r.0.value": 1 });
  });

  it("drops empty lists and dicts, keeps null and a root primitive under ''", () => {
    expect(flatten({ a: [], b: {}, c: null })).toEqual({ c: null });
    expect(flatten(5)).toEqual({ "": 5 });
  });

  it("keeps keys named __proto__, constructor and prototype as own keys, and they round-trip through filterAndUnflatten", () => {
    const text = '{"__proto__":[1,2],"a":{"__proto__":{"constructor":{"prototype":"x"}}},"b":{"__proto__":5}}';
    const flat = flatten(JSON.parse(text));
    expect(JSON.stringify(flat)).toBe('{"__proto__":[1,2],"a.__proto__.constructor.prototype":"x","b.__proto__":5}');
    expect(Object.getPrototypeOf(flat)).toBe(Object.prototype);
    const prefixed = Object.fromEntries(Object.entries(flat).map(([k, v]) => [`p.${k}`, v]));
    expect(JSON.stringify(filterAndUnflatten(prefixed, "p"))).toBe(text);
    expect(JSON.stringify(sanitizeAttributes(flat))).toBe(JSON.stringify(flat));
  });

  it("rejects non-string Map keys", () => {
    expect(() => flatten(new Map<unknown, number>([[1, 2]]))).toThrow(/Only string keys/);
  });

  it("round-trips through filterAndUnflatten", () => {
    const nested = {
      reward: [
        { name: "primary", value: 1 },
        { name: "len", value: 0.5 },
      ],
    };
    expect(filterAndUnflatten(flatten({ p: nested }), "p")).toEqual(nested);
  });
});

describe("sanitizeValue and checkAttributesSanity", () => {
  it("keeps primitives and homogeneous lists, JSON-encodes the rest", () => {
    expect(sanitizeValue("x")).toBe("x");
    expect(sanitizeValue([true, false])).toEqual([true, false]);
    expect(sanitizeValue([1, true])).toEqual([1, 1]);
    expect(sanitizeValue({ a: 1 })).toBe('{"a":1}');
    expect(sanitizeValue(null)).toBe("null");
    const logs = captureLogs();
    expect(sanitizeValue(["a", 1])).toBe('["a",1]');
    logs.stop();
    expect(logs.text()).toContain("Failed to sanitize list attribute");
  });

  it("rejects null, objects and mixed lists", () => {
    expect(() => checkAttributesSanity({ a: null })).toThrow(ValidationError);
    expect(() => checkAttributesSanity({ a: { b: 1 } })).toThrow(ValidationError);
    expect(() => checkAttributesSanity({ a: ["x", 1] })).toThrow(ValidationError);
    expect(() => checkAttributesSanity({ a: [1, 2.5], b: "s", c: [true] })).not.toThrow();
  });
});

describe("tags, links and exceptions", () => {
  it("makes indexed tag and link attributes and matches linked spans", () => {
    expect(makeTagAttributes(["a", "b"])).toEqual({ "agentlightning.tag.0": "a", "agentlightning.tag.1": "b" });
    const links = makeLinkAttributes({ span_id: "s1", "gen_ai.response.id": "r1" });
    expect(links).toEqual({
      "agentlightning.link.0.key_match": "span_id",
      "agentlightning.link.0.value_match": "s1",
      "agentlightning.link.1.key_match": "gen_ai.response.id",
      "agentlightning.link.1.value_match": "r1",
    });
    expect(() => makeLinkAttributes({ k: 3 as unknown as string })).toThrow(ValidationError);
    const a = spanFromAttributes({ span_id: "s1", attributes: { "gen_ai.response.id": "r1" } });
    const b = spanFromAttributes({ span_id: "s1", attributes: { "gen_ai.response.id": "r2" } });
    const parsed = filterAndUnflatten(links, "agentlightning.link") as { key_match: string; value_match: string }[];
    expect(queryLinkedSpans([a, b], parsed)).toEqual([a]);
  });

  it("formats exceptions with type, message, escaped and a stack that starts with 'Type: message'", () => {
    class QuotaError extends Error {}
    const attrs = formatExceptionAttributes(new QuotaError("over quota"));
    expect(attrs["exception.type"]).toBe("QuotaError");
    expect(attrs["exception.message"]).toBe("over quota");
    expect(attrs["exception.escaped"]).toBe(true);
    expect(String(attrs["exception.stacktrace"])).toContain("QuotaError: over quota");
    expect(formatExceptionAttributes(new TypeError("t"))["exception.type"]).toBe("TypeError");
  });
});
