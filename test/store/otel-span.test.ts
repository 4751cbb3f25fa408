/** spanFromOpenTelemetry against real spans of the OpenTelemetry JS SDK. */
import { describe, expect, it } from "vitest";
import { context, trace, SpanStatusCode, TraceFlags } from "@opentelemetry/api";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { hrTimeToSeconds, spanFromOpenTelemetry } from "../../src/store/otel-span.ts";
import { Span } from "../../src/types/index.ts";

function recordSpans(body: (tracer: ReturnType<BasicTracerProvider["getTracer"]>) => void): ReadableSpan[] {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ "service.name": "unit", "agentlightning.rollout_id": "ro-1" }),
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  });
  body(provider.getTracer("test"));
  return exporter.getFinishedSpans();
}

describe("spanFromOpenTelemetry", () => {
  it("converts ids, parent, status, attributes, events, links, times and resource", () => {
    const linked = { traceId: "0af7651916cd43dd8448eb211c80319c", spanId: "b7ad6b7169203331", traceFlags: TraceFlags.SAMPLED };
    const spans = recordSpans((tracer) => {
      const parent = tracer.startSpan("agent", { startTime: [1_700_000_000, 0] });
      const ctx = trace.setSpan(context.active(), parent);
      const child = tracer.startSpan(
        "llm",
        {
          attributes: { model: "m", tokens: [1, 2, 3], ok: true },
          links: [{ context: linked, attributes: { why: "retry" } }],
          startTime: [1_700_000_001, 500_000_000],
        },
        ctx,
      );
      child.addEvent("reward", { value: 0.5 }, [1_700_000_002, 250_000_000]);
      child.setStatus({ code: SpanStatusCode.ERROR, message: "boom" });
      child.end([1_700_000_003, 0]);
      parent.end([1_700_000_004, 0]);
    });
    const child = spans.find((s) => s.name === "llm")!;
    const parent = spans.find((s) => s.name === "agent")!;
    const span = spanFromOpenTelemetry(child, "ro-1", "at-1", 7);

    expect(Span.safeParse(span).success).toBe(true);
    expect(span).toMatchObject({
      rollout_id: "ro-1",
      attempt_id: "at-1",
      sequence_id: 7,
      trace_id: parent.spanContext().traceId,
      span_id: child.spanContext().spanId,
      parent_id: parent.spanContext().spanId,
      name: "llm",
      status: { status_code: "ERROR", description: "boom" },
      attributes: { model: "m", tokens: [1, 2, 3], ok: true },
      events: [{ name: "reward", attributes: { value: 0.5 }, timestamp: 1_700_000_002.25 }],
      links: [
        { context: { trace_id: linked.traceId, span_id: linked.spanId, is_remote: false, trace_state: {} }, attributes: { why: "retry" } },
      ],
      start_time: 1_700_000_001.5,
      end_time: 1_700_000_003,
      context: { trace_id: parent.spanContext().traceId, span_id: child.spanContext().spanId, is_remote: false, trace_state: {} },
      parent: { trace_id: parent.spanContext().traceId, span_id: parent.spanContext().spanId },
    });
    expect(span.trace_id).toMatch(/^[0-9a-f]{32}$/);
    expect(span.span_id).toMatch(/^[0-9a-f]{16}$/);
    expect(span.resource.attributes).toMatchObject({ "service.name": "unit", "agentlightning.rollout_id": "ro-1" });
    expect(span.resource.schema_url).toBe("");

    const root = spanFromOpenTelemetry(parent, "ro-1", "at-1", 1);
    expect(root.parent_id).toBeNull();
    expect(root.parent).toBeNull();
    expect(root.status).toEqual({ status_code: "UNSET", description: null });
  });

  it("a missing context gives all-zero ids; SDK 1.x parentSpanId and trace state are read", () => {
    const base = {
      name: "n",
      status: { code: 1 },
      attributes: {},
      events: [],
      links: [],
      startTime: [0, 0] as [number, number],
      endTime: [0, 0] as [number, number],
      resource: { attributes: {} },
    };
    const noCtx = spanFromOpenTelemetry({ ...base, spanContext: () => undefined as never }, "r", "a", 1);
    expect(noCtx.trace_id).toBe("0".repeat(32));
    expect(noCtx.span_id).toBe("0".repeat(16));
    expect(noCtx.context).toBeNull();
    expect(noCtx.status.status_code).toBe("OK");
    // hrtime 0 means "no timestamp".
    expect(noCtx.start_time).toBeNull();

    const old = spanFromOpenTelemetry(
      {
        ...base,
        spanContext: () => ({ traceId: "AB", spanId: "CD", traceState: { serialize: () => "k1=v1,k2=v2" } }),
        parentSpanId: "ef",
      },
      "r",
      "a",
      1,
    );
    expect(old.trace_id).toBe("ab".padStart(32, "0"));
    expect(old.context!.trace_state).toEqual({ k1: "v1", k2: "v2" });
    expect(old.parent_id).toBe("ef".padStart(16, "0"));
    expect(old.parent).toEqual({ trace_id: old.trace_id, span_id: old.parent_id, is_remote: false, trace_state: {} });
  });

  it("hrTimeToSeconds normalises tuples and nanosecond numbers", () => {
    expect(hrTimeToSeconds([12, 500_000_000])).toBe(12.5);
    expect(hrTimeToSeconds(1_700_000_000_000_000_000)).toBe(1_700_000_000);
    expect(hrTimeToSeconds([0, 0])).toBeNull();
    expect(hrTimeToSeconds(undefined)).toBeNull();
  });
});
