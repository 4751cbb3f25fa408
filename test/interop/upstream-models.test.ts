/**
 * The zod copies of upstream's pydantic models refuse what pydantic refuses and accept what it accepts
 * (upstream-models.ts), so that the replay tests fail where a Python client would.
 */
import { describe, expect, it } from "vitest";
import * as M from "./upstream-models.ts";

const attempt = { rollout_id: "ro-1", attempt_id: "at-1", sequence_id: 1, start_time: 1.5 };
const rollout = { rollout_id: "ro-1", input: { q: 1 }, start_time: 1700000000.25 };
const ctx = { trace_id: "t", span_id: "s", is_remote: false, trace_state: {} };
const span = {
  rollout_id: "ro-1",
  attempt_id: "at-1",
  sequence_id: 1,
  trace_id: "t",
  span_id: "s",
  parent_id: null,
  name: "n",
  status: { status_code: "OK" },
  attributes: { a: 1, b: "x", c: [1, 2.5], d: true },
  events: [],
  links: [],
  start_time: null,
  end_time: null,
  context: ctx,
  parent: null,
  resource: { attributes: {}, schema_url: "" },
};

const ok = (schema: { safeParse(v: unknown): { success: boolean } }, v: unknown) =>
  expect(schema.safeParse(v).success, JSON.stringify(v)).toBe(true);
const bad = (schema: { safeParse(v: unknown): { success: boolean } }, v: unknown) =>
  expect(schema.safeParse(v).success, JSON.stringify(v)).toBe(false);

describe("the pydantic mirrors", () => {
  it("fields without a default are required keys, even when they may be null", () => {
    ok(M.Rollout, rollout);
    ok(M.Rollout, { ...rollout, input: null });
    const { input: _i, ...noInput } = rollout;
    bad(M.Rollout, noInput);
    const { parent_id: _p, ...noParent } = span;
    bad(M.Span, noParent);
    ok(M.Span, span);
    bad(M.PaginatedResult(M.Attempt), { items: [], limit: -1, offset: 0 });
  });

  it("fields with a default may be left out; Optional ones may be null", () => {
    ok(M.Attempt, attempt);
    ok(M.Attempt, { ...attempt, end_time: null, worker_id: null, metadata: null });
    ok(M.Worker, { worker_id: "w" });
    bad(M.Worker, { worker_id: "w", status: null });
  });

  it("int takes whole numbers only, float any number, str no numbers; enums are exact", () => {
    bad(M.Attempt, { ...attempt, sequence_id: 1.5 });
    ok(M.Attempt, { ...attempt, start_time: 2 });
    bad(M.Attempt, { ...attempt, attempt_id: 7 });
    bad(M.Attempt, { ...attempt, status: "cancelled" });
    bad(M.Rollout, { ...rollout, status: "paused" });
    bad(M.RolloutConfig, { max_attempts: 0 });
    bad(M.Span, { ...span, attributes: { nested: { a: 1 } } });
  });

  it("unknown keys are never an error; Span keeps them", () => {
    ok(M.Attempt, { ...attempt, extra: 1 });
    expect(M.Span.parse({ ...span, kind: "SpanKind.INTERNAL" })).toMatchObject({ kind: "SpanKind.INTERNAL" });
  });

  it("an AttemptedRollout's attempt belongs to it; a rollout item is attempted exactly when it has the key", () => {
    ok(M.AttemptedRollout, { ...rollout, attempt });
    bad(M.AttemptedRollout, { ...rollout, attempt: { ...attempt, rollout_id: "ro-2" } });
    bad(M.RolloutOrAttempted, { ...rollout, attempt: null });
    ok(M.RolloutOrAttempted, rollout);
  });

  it("resources need their resource_type to pick the model", () => {
    ok(M.NamedResources, { llm: { resource_type: "llm", endpoint: "e", model: "m" } });
    bad(M.NamedResources, { llm: { endpoint: "e", model: "m" } });
    bad(M.NamedResources, { p: { resource_type: "prompt_template", template: "t", engine: "mustache" } });
  });
});
