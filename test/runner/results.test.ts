/** Every return kind of a rollout method (docs/runner.md#writing-an-agent), through a real runner and store. */
import { describe, expect, it } from "vitest";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { LitAgent } from "../../src/runner/index.ts";
import { drain, RecordingHook, storeWithResources } from "./helpers.ts";
import { captureLogs, emitReward } from "../../src/tracer/index.ts";
import { spanFromAttributes, type AttemptedRollout, type NamedResources } from "../../src/types/index.ts";

type Ret = (rollout: AttemptedRollout) => unknown;

class Returning extends LitAgent<unknown> {
  constructor(private readonly ret: Ret) {
    super();
  }
  override async rollout(_task: unknown, _r: NamedResources, rollout: AttemptedRollout) {
    return this.ret(rollout) as never;
  }
}

async function runOnce(ret: Ret) {
  const store = await storeWithResources();
  const r = await store.enqueueRollout({ q: 1 }, { mode: "train" });
  const hook = new RecordingHook();
  const logs = captureLogs();
  await drain(store, new Returning(ret), 1, [hook]);
  logs.stop();
  const rollout = (await store.getRolloutById(r.rollout_id))!;
  const spans = (await store.querySpans(r.rollout_id)).items;
  return { store, rollout, spans, hook, logs: logs.text() };
}

const otelSpans = () => {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const t = provider.getTracer("external");
  t.startSpan("ext.a").end();
  t.startSpan("ext.b").end();
  return exporter.getFinishedSpans();
};

describe("what a rollout returns", () => {
  it("nothing: the traced spans (with an emitted reward) are the result", async () => {
    const { rollout, spans, hook } = await runOnce(() => {
      emitReward(0.5);
    });
    expect(rollout.status).toBe("succeeded");
    expect(spans.map((s) => s.attributes["agentlightning.reward.0.value"])).toEqual([0.5]);
    expect(hook.calls.at(-1)).toBe("rollout_end(1)");
  });

  it("a number: the runner adds one reward span after the traced ones; hooks see the trace without it", async () => {
    const { rollout, spans, hook } = await runOnce(() => {
      emitReward(0.1);
      return 0.9;
    });
    expect(rollout.status).toBe("succeeded");
    expect(spans.map((s) => s.attributes["agentlightning.reward.0.value"])).toEqual([0.1, 0.9]);
    expect(spans[1]!.sequence_id).toBeGreaterThan(spans[0]!.sequence_id);
    expect(spans[1]!.name).toBe("agentlightning.annotation");
    expect(spans[1]!.parent_id).toBeNull();
    expect(hook.calls.at(-1)).toBe("rollout_end(1)");
  });

  it("a boolean: a reward of 1 with a warning", async () => {
    const { spans, logs } = await runOnce(() => true);
    expect(spans.map((s) => s.attributes["agentlightning.reward.0.value"])).toEqual([1]);
    expect(logs).toContain("Reward is not a number");
  });

  it("OpenTelemetry ReadableSpans: stored through addOtelSpan with store sequence ids", async () => {
    const { rollout, spans, logs } = await runOnce(() => otelSpans());
    expect(rollout.status).toBe("succeeded");
    expect(spans.map((s) => s.name)).toEqual(["ext.a", "ext.b"]);
    expect(spans.map((s) => s.sequence_id)).toEqual([1, 2]);
    expect(logs).toContain("duplicate spans");
  });

  it("stored Spans: kept with their own ids", async () => {
    const { rollout, spans } = await runOnce((r) => [
      spanFromAttributes({
        rollout_id: r.rollout_id,
        attempt_id: r.attempt.attempt_id,
        sequence_id: 40,
        span_id: "aaaaaaaaaaaaaaaa",
        name: "mine",
      }),
    ]);
    expect(rollout.status).toBe("succeeded");
    expect(spans.map((s) => [s.span_id, s.sequence_id, s.name])).toEqual([["aaaaaaaaaaaaaaaa", 40, "mine"]]);
  });

  it("SpanCoreFields: numbered in bulk and stored", async () => {
    const core = (name: string) => ({
      name,
      status: { status_code: "OK" as const, description: null },
      attributes: { k: name },
      start_time: 5,
      end_time: 6,
    });
    const { rollout, spans } = await runOnce(() => [core("c1"), core("c2"), core("c3")]);
    expect(rollout.status).toBe("succeeded");
    expect(spans.map((s) => [s.name, s.sequence_id, s.start_time])).toEqual([
      ["c1", 1, 5],
      ["c2", 2, 5],
      ["c3", 3, 5],
    ]);
  });

  it("an empty list: success with a warning and no spans", async () => {
    const { rollout, spans, logs } = await runOnce(() => []);
    expect(rollout.status).toBe("succeeded");
    expect(spans).toEqual([]);
    expect(logs).toContain("returns an empty list");
  });

  it("a mixed list or another type: the attempt fails with 'Invalid raw result type'", async () => {
    const mixed = await runOnce((r) => [spanFromAttributes({ rollout_id: r.rollout_id, attempt_id: r.attempt.attempt_id }), { name: "x" }]);
    expect(mixed.rollout.status).toBe("failed");
    expect(mixed.logs).toContain("Invalid raw result type");
    const dict = await runOnce(() => ({ reward: 1 }));
    expect(dict.rollout.status).toBe("failed");
    expect(dict.logs).toContain("Invalid raw result type");
    const str = await runOnce(() => "done");
    expect(str.rollout.status).toBe("failed");
    expect(str.hook.calls).toEqual(["rollout_start", "trace_start", "trace_end", "rollout_end(0)"]);
  });
});
