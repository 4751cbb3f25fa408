/** OtelTracer against an in-memory store: routing, order, batching, concurrency, nesting rules. */
import { describe, expect, it } from "vitest";
import { context, trace } from "@opentelemetry/api";
import { InMemoryLightningStore } from "../../src/store/index.ts";
import { DummyTracer, OtelTracer, emitMessage, emitReward, getActiveTracer, operation } from "../../src/tracer/index.ts";

const lib = trace.getTracer("some.instrumented.library");

/** A plain OTel-instrumented function, as any library would write it. */
async function instrumented(label: string, depth: number): Promise<void> {
  await lib.startActiveSpan(`${label}.d${depth}`, async (span) => {
    span.setAttribute("depth", depth);
    await new Promise((r) => setTimeout(r, 2));
    if (depth > 0) {
      await instrumented(label, depth - 1);
      await instrumented(label, depth - 1);
    }
    span.end();
  });
}

async function setup(options: ConstructorParameters<typeof OtelTracer>[0] = {}) {
  const store = new InMemoryLightningStore();
  const tracer = new OtelTracer(options);
  tracer.initWorker(0, store);
  return { store, tracer };
}

describe("OtelTracer", () => {
  it("stores spans of a plain OTel-instrumented function under the right attempt, in start order, with their tree", async () => {
    const { store, tracer } = await setup();
    const r = await store.startRollout({ task: 1 });
    const aid = r.attempt.attempt_id;
    await tracer.traceContext({ rolloutId: r.rollout_id, attemptId: aid }, () => instrumented("f", 2));
    const spans = (await store.querySpans(r.rollout_id)).items;
    expect(spans).toHaveLength(7);
    expect(spans.every((s) => s.rollout_id === r.rollout_id && s.attempt_id === aid)).toBe(true);
    // Pre-order (start order) of the call tree, numbered consecutively.
    expect(spans.map((s) => s.name)).toEqual(["f.d2", "f.d1", "f.d0", "f.d0", "f.d1", "f.d0", "f.d0"]);
    const seqs = spans.map((s) => s.sequence_id);
    expect(seqs).toEqual(seqs.map((_, i) => seqs[0]! + i));
    for (let i = 1; i < spans.length; i++) expect(spans[i]!.start_time!).toBeGreaterThanOrEqual(spans[i - 1]!.start_time!);
    const byId = new Map(spans.map((s) => [s.span_id, s]));
    for (const s of spans.slice(1)) expect(byId.get(s.parent_id!)!.attributes.depth).toBe((s.attributes.depth as number) + 1);
    expect(spans[0]!.parent_id).toBeNull();
    expect(tracer.getLastTrace().map((s) => s.span_id)).toEqual(spans.map((s) => s.span_id));
    expect((await store.getRolloutById(r.rollout_id))!.status).toBe("running");
  });

  it("keeps start order across many small batches (parents sent after their children)", async () => {
    const { store, tracer } = await setup({ maxBatchSize: 2 });
    const r = await store.startRollout(null);
    await tracer.traceContext({ rolloutId: r.rollout_id, attemptId: r.attempt.attempt_id }, () => instrumented("g", 3));
    const spans = (await store.querySpans(r.rollout_id)).items;
    expect(spans).toHaveLength(15);
    expect(spans.map((s) => s.start_time!)).toEqual([...spans.map((s) => s.start_time!)].sort((a, b) => a - b));
    expect(spans[0]!.name).toBe("g.d3");
  });

  it("numbers a retry's spans after the first attempt's, and a returned reward after both", async () => {
    const { store, tracer } = await setup();
    const r = await store.startRollout(null, { config: { max_attempts: 2, retry_condition: ["failed"] } });
    await tracer.traceContext({ rolloutId: r.rollout_id, attemptId: r.attempt.attempt_id }, () => instrumented("a1", 1));
    await store.updateAttempt(r.rollout_id, r.attempt.attempt_id, { status: "failed" });
    const second = await store.startAttempt(r.rollout_id);
    await tracer.traceContext({ rolloutId: r.rollout_id, attemptId: second.attempt.attempt_id }, async () => {
      await instrumented("a2", 1);
      emitReward(1);
    });
    const next = await store.getNextSpanSequenceId(r.rollout_id, second.attempt.attempt_id);
    const spans = (await store.querySpans(r.rollout_id)).items;
    const first = spans.filter((s) => s.attempt_id === r.attempt.attempt_id).map((s) => s.sequence_id);
    const later = spans.filter((s) => s.attempt_id === second.attempt.attempt_id).map((s) => s.sequence_id);
    expect(first).toHaveLength(3);
    expect(later).toHaveLength(4);
    expect(Math.min(...later)).toBeGreaterThan(Math.max(...first));
    expect(next).toBeGreaterThan(Math.max(...later));
  });

  it("keeps concurrent rollouts apart (one processor, many scopes)", async () => {
    const store = new InMemoryLightningStore();
    const rollouts = await Promise.all([0, 1, 2, 3].map(() => store.startRollout(null)));
    await Promise.all(
      rollouts.map(async (r, i) => {
        const tracer = new OtelTracer();
        tracer.initWorker(i, store);
        await tracer.traceContext({ rolloutId: r.rollout_id, attemptId: r.attempt.attempt_id }, async () => {
          await instrumented(`r${i}`, 2);
          emitReward(i);
        });
      }),
    );
    for (const [i, r] of rollouts.entries()) {
      const spans = (await store.querySpans(r.rollout_id)).items;
      expect(spans).toHaveLength(8);
      expect(spans.slice(0, 7).every((s) => s.name.startsWith(`r${i}.`))).toBe(true);
      expect(spans[7]!.attributes["agentlightning.reward.0.value"]).toBe(i);
    }
  });

  it("ignores spans outside any rollout and emits nested under the active span", async () => {
    const { store, tracer } = await setup();
    await instrumented("outside", 0);
    const r = await store.startRollout(null);
    await tracer.traceContext({ rolloutId: r.rollout_id, attemptId: r.attempt.attempt_id }, async () => {
      const add = operation(function add(a: number, b: number) {
        emitMessage("adding");
        return a + b;
      });
      expect(add(2, 3)).toBe(5);
    });
    const spans = (await store.querySpans(r.rollout_id)).items;
    expect(spans.map((s) => s.name)).toEqual(["agentlightning.operation", "agentlightning.message"]);
    expect(spans[0]!.attributes).toMatchObject({
      "agentlightning.operation.name": "add",
      "agentlightning.operation.input.a": 2,
      "agentlightning.operation.input.b": 3,
      "agentlightning.operation.output": 5,
    });
    expect(spans[1]!.parent_id).toBe(spans[0]!.span_id);
    expect((await store.statistics()).total_spans).toBe(2);
  });

  it("records a failing async operation as ERROR and re-throws", async () => {
    const { store, tracer } = await setup();
    const r = await store.startRollout(null);
    const boom = operation(async function boom(x: number) {
      await new Promise((res) => setTimeout(res, 1));
      throw new Error(`bad ${x}`);
    });
    await expect(tracer.traceContext({ rolloutId: r.rollout_id, attemptId: r.attempt.attempt_id }, () => boom(4))).rejects.toThrow("bad 4");
    const [span] = (await store.querySpans(r.rollout_id)).items;
    expect(span!.status).toEqual({ status_code: "ERROR", description: "bad 4" });
    expect(span!.attributes["exception.message"]).toBe("bad 4");
    expect(span!.attributes["agentlightning.operation.input.x"]).toBe(4);
    expect(span!.events.map((e) => e.name)).toContain("exception");
  });

  it("sets the active tracer only inside the context and refuses to nest", async () => {
    const { store, tracer } = await setup();
    const r = await store.startRollout(null);
    expect(getActiveTracer()).toBeNull();
    await tracer.traceContext({ rolloutId: r.rollout_id, attemptId: r.attempt.attempt_id }, async () => {
      expect(getActiveTracer()).toBe(tracer);
      await expect(new DummyTracer().traceContext({}, () => 1)).rejects.toThrow(/already set/);
    });
    expect(getActiveTracer()).toBeNull();
    await expect(tracer.traceContext({ rolloutId: r.rollout_id }, () => 1)).rejects.toThrow(/together/);
    await expect(new OtelTracer().traceContext({}, () => 1)).rejects.toThrow(/initWorker/);
  });

  it("without ids collects spans locally only", async () => {
    const { store, tracer } = await setup();
    await tracer.traceContext({}, () => instrumented("local", 1));
    expect(tracer.getLastTrace().map((s) => s.name)).toEqual(["local.d1", "local.d0", "local.d0"]);
    expect(tracer.getLastTrace()[0]!.rollout_id).toBe("rollout-dummy");
    expect((await store.statistics()).total_spans).toBe(0);
  });

  it("fails the context when the store refuses the spans", async () => {
    const { store, tracer } = await setup();
    const r = await store.startRollout(null);
    store.addManySpans = async () => {
      throw new Error("disk full");
    };
    await expect(
      tracer.traceContext({ rolloutId: r.rollout_id, attemptId: r.attempt.attempt_id }, () => instrumented("x", 0)),
    ).rejects.toThrow("disk full");
  });

  it("delivers spans of a long attempt before it ends (they double as heartbeats)", async () => {
    const { store, tracer } = await setup({ flushIntervalSeconds: 0.02 });
    const r = await store.startRollout(null);
    await tracer.traceContext({ rolloutId: r.rollout_id, attemptId: r.attempt.attempt_id }, async () => {
      emitMessage("early");
      await new Promise((res) => setTimeout(res, 100));
      expect((await store.querySpans(r.rollout_id)).items.map((s) => s.name)).toEqual(["agentlightning.message"]);
      expect((await store.getLatestAttempt(r.rollout_id))!.status).toBe("running");
      expect(context.active()).toBeDefined();
    });
  });
});
