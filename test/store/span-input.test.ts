/**
 * `ownedSpan` checks and copies a complete span in one hand-written pass and sends everything else
 * through the zod `Span` schema. This compares the two on many random variants of a span: the result
 * must be what zod gives (copied and deeply frozen), and a span zod rejects must throw a ValidationError.
 */
import { describe, expect, it } from "vitest";
import { ownedSpan } from "../../src/store/inputs.ts";
import { Span, ValidationError } from "../../src/types/index.ts";
import { rng } from "../wasm/random.ts";

const context = (trace: string, span: string) => ({ trace_id: trace, span_id: span, is_remote: false, trace_state: { vendor: "x" } });

function baseSpan(): Record<string, unknown> {
  return {
    rollout_id: "ro-000000000001",
    attempt_id: "at-00000001",
    sequence_id: 3,
    trace_id: "t".repeat(32),
    span_id: "s".repeat(16),
    parent_id: "p".repeat(16),
    name: "openai.chat.completion",
    status: { status_code: "OK", description: null },
    attributes: { "gen_ai.system": "openai", tokens: 12, ok: true, ids: [1, 2, 3], tags: ["a", "b"], flags: [true] },
    events: [{ name: "reward", attributes: { value: 1 }, timestamp: 12.5 }],
    links: [{ context: context("l".repeat(32), "k".repeat(16)), attributes: { why: "retry" } }],
    start_time: 10,
    end_time: 11.5,
    context: context("t".repeat(32), "s".repeat(16)),
    parent: context("t".repeat(32), "p".repeat(16)),
    resource: { attributes: { "service.name": "agent" }, schema_url: "" },
  };
}

/** Every path to an object or value inside the span (keys and array indexes). */
function paths(v: unknown, prefix: (string | number)[] = []): (string | number)[][] {
  const out: (string | number)[][] = [prefix];
  if (Array.isArray(v)) v.forEach((x, i) => out.push(...paths(x, [...prefix, i])));
  else if (typeof v === "object" && v !== null)
    for (const k of Object.keys(v)) out.push(...paths((v as Record<string, unknown>)[k], [...prefix, k]));
  return out;
}

const REPLACEMENTS: unknown[] = [
  undefined,
  null,
  0,
  -1.5,
  7,
  Number.NaN,
  Number.POSITIVE_INFINITY,
  "",
  "OK",
  "x",
  true,
  [],
  [1, "a"],
  ["a"],
  [1.5],
  [true, false],
  {},
  { a: 1 },
  { status_code: "ERROR" },
];

/** Sets (or deletes, or adds a sibling key at) a path of a deep copy. */
function mutate(span: Record<string, unknown>, path: (string | number)[], rand: () => number): Record<string, unknown> {
  const copy = structuredClone(span);
  if (path.length === 0) return copy;
  let parent: Record<string | number, unknown> = copy;
  for (const p of path.slice(0, -1)) {
    const next = parent[p];
    // An earlier edit replaced this part: nothing left to edit here.
    if (typeof next !== "object" || next === null) return copy;
    parent = next as Record<string | number, unknown>;
  }
  const last = path[path.length - 1]!;
  const r = rand();
  if (r < 0.15 && !Array.isArray(parent)) delete parent[last];
  else if (r < 0.3 && !Array.isArray(parent))
    parent[`extra_${Math.floor(rand() * 3)}`] = REPLACEMENTS[Math.floor(rand() * REPLACEMENTS.length)];
  else parent[last] = REPLACEMENTS[Math.floor(rand() * REPLACEMENTS.length)];
  return copy;
}

function expectDeepFrozen(v: unknown): void {
  if (typeof v !== "object" || v === null) return;
  expect(Object.isFrozen(v)).toBe(true);
  for (const x of Object.values(v)) expectDeepFrozen(x);
}

function expectSameAsZod(input: unknown): "ok" | "rejected" {
  const parsed = Span.safeParse(input);
  if (!parsed.success) {
    expect(() => ownedSpan(input)).toThrow(ValidationError);
    return "rejected";
  }
  const owned = ownedSpan(input);
  expect(owned).toEqual(parsed.data);
  expectDeepFrozen(owned);
  return "ok";
}

describe("ownedSpan", () => {
  it("copies a complete span into deeply frozen objects that share nothing mutable with the input", () => {
    const input = baseSpan();
    const owned = ownedSpan(input);
    expect(owned).toEqual(input);
    expectDeepFrozen(owned);
    (input.attributes as Record<string, unknown>).tokens = 99;
    ((input.events as Record<string, unknown>[])[0]!.attributes as Record<string, unknown>).value = 0;
    (input.context as Record<string, unknown>).trace_state = {};
    expect(owned.attributes.tokens).toBe(12);
    expect(owned.events[0]!.attributes.value).toBe(1);
    expect(owned.context?.trace_state).toEqual({ vendor: "x" });
  });

  it("keeps extra keys of the span and of its loose parts, and drops those of the resource (as zod does)", () => {
    const input = baseSpan();
    input.custom = { nested: [1, 2] };
    (input.status as Record<string, unknown>).extra = "kept";
    (input.resource as Record<string, unknown>).extra = "dropped";
    const owned = ownedSpan(input) as Record<string, unknown>;
    expect(owned.custom).toEqual({ nested: [1, 2] });
    expect((owned.status as Record<string, unknown>).extra).toBe("kept");
    expect(owned.resource).toEqual({ attributes: { "service.name": "agent" }, schema_url: "" });
  });

  it("agrees with the zod schema on 1,500 random variants (valid ones copied equal, invalid ones rejected)", () => {
    const rand = rng(42).next;
    const base = baseSpan();
    const all = paths(base);
    const seen = { ok: 0, rejected: 0 };
    for (let i = 0; i < 1500; i++) {
      let span = base;
      const edits = 1 + Math.floor(rand() * 2);
      for (let e = 0; e < edits; e++) span = mutate(span, all[Math.floor(rand() * all.length)]!, rand);
      seen[expectSameAsZod(span)]++;
    }
    // Both outcomes must be well represented, or the comparison proves little.
    expect(seen.ok).toBeGreaterThan(150);
    expect(seen.rejected).toBeGreaterThan(150);
  });

  it("reports issue paths with the span's index in a batch", () => {
    const bad = baseSpan();
    bad.sequence_id = 1.5;
    try {
      ownedSpan(bad, 4);
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(ValidationError);
      expect((e as ValidationError).issues[0]!.path).toEqual([4, "sequence_id"]);
    }
  });
});
