import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import {
  AttemptedRollout,
  EnqueueRolloutRequest,
  ManualClock,
  NamedResources,
  Rollout,
  RolloutConfig,
  Span,
  SystemClock,
  ValidationError,
  convertTimestamp,
  formatPromptTemplate,
  newAttemptId,
  newResourcesId,
  newRolloutId,
  parseOrThrow,
  proxyBaseUrl,
  spanFromAttributes,
} from "../../src/types/index.ts";

describe("ids", () => {
  it("have upstream's formats", () => {
    expect(newRolloutId()).toMatch(/^ro-[0-9a-f]{12}$/);
    expect(newAttemptId()).toMatch(/^at-[0-9a-f]{8}$/);
    expect(newResourcesId()).toMatch(/^rs-[0-9a-f]{12}$/);
    expect(new Set(Array.from({ length: 1000 }, newRolloutId)).size).toBe(1000);
  });

  it("rollout ids of one process count up (so store indexes insert next to each other), from a random start", () => {
    const ids = Array.from({ length: 1000 }, newRolloutId);
    const numbers = ids.map((id) => Number.parseInt(id.slice(3), 16));
    // Consecutive modulo 2^48 (a wrap inside these 1000 is possible only in theory; allow it).
    for (let i = 1; i < numbers.length; i++) expect((numbers[i]! - numbers[i - 1]! + 2 ** 48) % 2 ** 48).toBe(1);
    const child = spawnSync(
      process.execPath,
      ["--import", "tsx", "-e", "import('./src/types/ids.ts').then((m) => console.log(m.newRolloutId()))"],
      { encoding: "utf8" },
    );
    expect(child.stdout.trim()).toMatch(/^ro-[0-9a-f]{12}$/);
    expect(Math.abs(Number.parseInt(child.stdout.trim().slice(3), 16) - numbers[0]!)).toBeGreaterThan(1_000_000); // another process starts elsewhere
  });
});

describe("clock", () => {
  it("system clock never repeats and is in seconds", () => {
    const c = new SystemClock();
    const a = c.now();
    const b = c.now();
    expect(b).toBeGreaterThan(a);
    expect(Math.abs(a - Date.now() / 1000)).toBeLessThan(5);
  });
  it("manual clock moves only when told", () => {
    const c = new ManualClock(100);
    expect(c.now()).toBe(100);
    c.advance(5);
    expect(c.now()).toBe(105);
  });
  it("normalises OTel nanoseconds", () => {
    expect(convertTimestamp(0)).toBeNull();
    expect(convertTimestamp(null)).toBeNull();
    expect(convertTimestamp(1_700_000_000_500_000_000n)).toBeCloseTo(1_700_000_000.5, 6);
    expect(convertTimestamp(1_700_000_000.25)).toBe(1_700_000_000.25);
  });
});

describe("schemas", () => {
  it("fill rollout defaults like upstream", () => {
    const r = Rollout.parse({ rollout_id: "ro-1", input: null, start_time: 1 });
    expect(r).toMatchObject({ end_time: null, mode: null, status: "queuing", metadata: null });
    expect(r.config).toEqual({ timeout_seconds: null, unresponsive_seconds: null, max_attempts: 1, retry_condition: [] });
  });
  it("reject max_attempts < 1 with the issue path", () => {
    expect(() => parseOrThrow(RolloutConfig, { max_attempts: 0 })).toThrow(ValidationError);
    try {
      parseOrThrow(RolloutConfig, { max_attempts: 0 });
    } catch (e) {
      expect((e as ValidationError).issues[0]!.path).toEqual(["max_attempts"]);
    }
  });
  it("require input on enqueue requests, null allowed", () => {
    expect(EnqueueRolloutRequest.safeParse({}).success).toBe(false);
    expect(EnqueueRolloutRequest.safeParse({ input: null }).success).toBe(true);
  });
  it("check the attempt belongs to the rollout", () => {
    const attempt = { rollout_id: "ro-2", attempt_id: "at-1", sequence_id: 1, start_time: 1 };
    expect(AttemptedRollout.safeParse({ rollout_id: "ro-1", input: 1, start_time: 1, attempt }).success).toBe(false);
  });
  it("keep extra span keys and require nullable keys to be present", () => {
    const s = spanFromAttributes({ rollout_id: "ro-1", attempt_id: "at-1", parent_id: "abcd" });
    expect(s.parent?.span_id).toBe("abcd");
    expect(s.trace_id).toMatch(/^[0-9a-f]{32}$/);
    expect(Span.parse({ ...s, custom: { a: 1 } }).custom).toEqual({ a: 1 });
    const { parent_id: _omit, ...missing } = s;
    expect(Span.safeParse(missing).success).toBe(false);
  });
  it("discriminate resources by resource_type", () => {
    const r = NamedResources.parse({ main: { resource_type: "llm", endpoint: "http://x", model: "m" } });
    expect(r.main).toEqual({ resource_type: "llm", endpoint: "http://x", model: "m", api_key: null, sampling_parameters: {} });
    expect(NamedResources.safeParse({ bad: { resource_type: "nope" } }).success).toBe(false);
  });
});

describe("resources helpers", () => {
  it("build proxy base urls like upstream", () => {
    expect(proxyBaseUrl("http://h/v1/", "ro-1", "at-1")).toBe("http://h/rollout/ro-1/attempt/at-1/v1");
    expect(proxyBaseUrl("http://h", "ro-1", "at-1")).toBe("http://h/rollout/ro-1/attempt/at-1");
    expect(proxyBaseUrl("http://h", null, null)).toBe("http://h");
    expect(() => proxyBaseUrl("http://h", "ro-1", null)).toThrow(ValidationError);
  });
  it("format f-string templates", () => {
    const t = { resource_type: "prompt_template" as const, template: "Q: {q} {{x}}", engine: "f-string" as const };
    expect(formatPromptTemplate(t, { q: "2+2" })).toBe("Q: 2+2 {x}");
    expect(() => formatPromptTemplate(t, {})).toThrow(ValidationError);
    expect(() => formatPromptTemplate({ ...t, engine: "jinja" }, { q: 1 })).toThrow(ValidationError);
  });
});
