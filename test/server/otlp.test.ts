/**
 * OTLP/HTTP ingestion with the real OpenTelemetry exporters (protobuf and JSON, gzip and plain): spans
 * arrive with the right ids, times, attributes, parents and sequence ids (docs/http-api.md#otlp-post-v1traces).
 */
import { ROOT_CONTEXT, SpanStatusCode, trace, type Tracer } from "@opentelemetry/api";
import { hrTimeToMilliseconds } from "@opentelemetry/core";
import { OTLPTraceExporter as HttpJsonExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { OTLPTraceExporter as ProtoExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { CompressionAlgorithm } from "@opentelemetry/otlp-exporter-base";
import { resourceFromAttributes } from "@opentelemetry/resources";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
  type SpanExporter,
} from "@opentelemetry/sdk-trace-base";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import type { AttemptedRollout } from "../../src/types/index.ts";
import { LightningResourceAttributes as R } from "../../src/types/index.ts";
import { startInProcess, type InProcessServer } from "./in-process.ts";

let store: InMemoryLightningStore;
let server: InProcessServer;

beforeEach(async () => {
  store = new InMemoryLightningStore({ scanDebounceSeconds: 0 });
  server = await startInProcess(store);
});
afterEach(async () => {
  await server.close();
  await store.close();
});

/** A provider that exports to `exporter` and also keeps the finished spans locally for comparison. */
function providerFor(exporter: SpanExporter, resource: Record<string, string>) {
  const local = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ "service.name": "otlp-test", ...resource }),
    spanProcessors: [new SimpleSpanProcessor(exporter), new SimpleSpanProcessor(local)],
  });
  return { provider, local, tracer: provider.getTracer("lightning-test") };
}

/** A root span with two children (one with an error status and an event, one with a link). */
function emitTree(tracer: Tracer): void {
  const root = tracer.startSpan("agent.run", {
    attributes: { "gen_ai.system": "openai", turns: 3, ratio: 0.25, ok: true, tags: ["a", "b"] },
  });
  const ctx = trace.setSpan(ROOT_CONTEXT, root);
  const llm = tracer.startSpan("llm.call", { attributes: { "llm.tokens": [1, 2, 3] } }, ctx);
  llm.addEvent("first_token", { index: 0 });
  llm.setStatus({ code: SpanStatusCode.ERROR, message: "rate limited" });
  llm.end();
  const tool = tracer.startSpan("tool.call", { links: [{ context: llm.spanContext(), attributes: { why: "retry" } }] }, ctx);
  tool.end();
  root.end();
}

const seconds = (hr: [number, number]): number => hrTimeToMilliseconds(hr) / 1000;

function expectSameSpans(stored: Awaited<ReturnType<typeof store.querySpans>>["items"], sent: ReadableSpan[], r: AttemptedRollout): void {
  expect(stored).toHaveLength(sent.length);
  const byId = new Map(stored.map((s) => [s.span_id, s]));
  for (const s of sent) {
    const got = byId.get(s.spanContext().spanId);
    expect(got, `span ${s.name} arrived`).toBeDefined();
    expect(got).toMatchObject({
      rollout_id: r.rollout_id,
      attempt_id: r.attempt.attempt_id,
      trace_id: s.spanContext().traceId,
      name: s.name,
      parent_id: s.parentSpanContext?.spanId ?? null,
    });
    expect(got!.start_time).toBeCloseTo(seconds(s.startTime), 5);
    expect(got!.end_time).toBeCloseTo(seconds(s.endTime), 5);
    expect(got!.attributes).toEqual(s.attributes);
    expect(got!.resource.attributes).toMatchObject({
      [R.ROLLOUT_ID]: r.rollout_id,
      [R.ATTEMPT_ID]: r.attempt.attempt_id,
      "service.name": "otlp-test",
    });
    if (s.parentSpanContext) expect(got!.parent).toMatchObject({ span_id: s.parentSpanContext.spanId, trace_id: s.spanContext().traceId });
  }
  const llm = stored.find((s) => s.name === "llm.call")!;
  expect(llm.status).toEqual({ status_code: "ERROR", description: "rate limited" });
  expect(llm.events).toHaveLength(1);
  expect(llm.events[0]).toMatchObject({ name: "first_token", attributes: { index: 0 } });
  const tool = stored.find((s) => s.name === "tool.call")!;
  expect(tool.links).toEqual([
    { context: { trace_id: llm.trace_id, span_id: llm.span_id, is_remote: false, trace_state: {} }, attributes: { why: "retry" } },
  ]);
  // Sequence ids were assigned server-side, one per span, in arrival order.
  expect(stored.map((s) => s.sequence_id).sort((a, b) => a - b)).toEqual(stored.map((_, i) => i + 1));
}

const EXPORTERS = {
  "protobuf (exporter-trace-otlp-proto)": (url: string) => new ProtoExporter({ url }),
  "protobuf + gzip (exporter-trace-otlp-proto)": (url: string) => new ProtoExporter({ url, compression: CompressionAlgorithm.GZIP }),
  "JSON (exporter-trace-otlp-http)": (url: string) => new HttpJsonExporter({ url }),
  "JSON + gzip (exporter-trace-otlp-http)": (url: string) => new HttpJsonExporter({ url, compression: CompressionAlgorithm.GZIP }),
};

describe("OTLP/HTTP ingestion from the real exporters", () => {
  it.each(Object.entries(EXPORTERS))("%s: ids, times, attributes, parents, status, events and links arrive", async (_label, make) => {
    const r = await store.startRollout({ task: 1 });
    const { provider, local, tracer } = providerFor(make(`${server.url}/v1/traces`), {
      [R.ROLLOUT_ID]: r.rollout_id,
      [R.ATTEMPT_ID]: r.attempt.attempt_id,
    });
    emitTree(tracer);
    await provider.forceFlush();
    const sent = local.getFinishedSpans();
    await provider.shutdown();
    const stored = (await store.querySpans(r.rollout_id)).items;
    expectSameSpans(stored, sent, r);
    // A span is a heartbeat: the attempt and the rollout are running now.
    expect((await store.getRolloutById(r.rollout_id))!.status).toBe("running");
  });

  it("span-level ids win over resource-level ones, and an explicit sequence id is kept", async () => {
    const a = await store.startRollout("a");
    const b = await store.startRollout("b");
    const { provider, tracer } = providerFor(new ProtoExporter({ url: `${server.url}/v1/traces` }), {
      [R.ROLLOUT_ID]: a.rollout_id,
      [R.ATTEMPT_ID]: a.attempt.attempt_id,
    });
    tracer.startSpan("to-a").end();
    tracer
      .startSpan("to-b", { attributes: { [R.ROLLOUT_ID]: b.rollout_id, [R.ATTEMPT_ID]: b.attempt.attempt_id, [R.SPAN_SEQUENCE_ID]: 41 } })
      .end();
    await provider.shutdown();
    expect((await store.querySpans(a.rollout_id)).items.map((s) => [s.name, s.sequence_id])).toEqual([["to-a", 1]]);
    expect((await store.querySpans(b.rollout_id)).items.map((s) => [s.name, s.sequence_id])).toEqual([["to-b", 41]]);
    expect(await store.getNextSpanSequenceId(b.rollout_id, b.attempt.attempt_id)).toBe(42);
  });

  it("spans for an unknown rollout are refused with 404, nothing is stored, the server stays up", async () => {
    const r = await store.startRollout("x");
    const exporter = new ProtoExporter({ url: `${server.url}/v1/traces` });
    const results: number[] = [];
    const provider = new BasicTracerProvider({
      resource: resourceFromAttributes({ [R.ROLLOUT_ID]: "ro-000000000000", [R.ATTEMPT_ID]: "at-00000000" }),
      spanProcessors: [
        new SimpleSpanProcessor({
          export: (spans, done) => exporter.export(spans, (res) => (results.push(res.code), done(res))),
          shutdown: () => exporter.shutdown(),
        }),
      ],
    });
    provider.getTracer("t").startSpan("lost").end();
    await provider.shutdown();
    expect(results).toEqual([1]); // ExportResultCode.FAILED
    expect((await store.statistics()).total_spans).toBe(0);
    expect((await fetch(`${server.url}/v1/agl/health`)).status).toBe(200);
    expect((await store.querySpans(r.rollout_id)).total).toBe(0);
  });
});

describe("OTLP/HTTP edge cases (raw requests)", () => {
  it("an empty protobuf body is an empty request: 200 with an empty response", async () => {
    const res = await fetch(`${server.url}/v1/traces`, {
      method: "POST",
      headers: { "content-type": "application/x-protobuf" },
      body: new Uint8Array(),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/x-protobuf");
    expect((await res.arrayBuffer()).byteLength).toBe(0);
  });

  it("bytes that do not parse give 400 with a google.rpc.Status message", async () => {
    const res = await fetch(`${server.url}/v1/traces`, {
      method: "POST",
      headers: { "content-type": "application/x-protobuf" },
      body: new Uint8Array([0x0a, 0xff, 0xff, 0x01]),
    });
    expect(res.status).toBe(400);
    const text = new TextDecoder().decode(await res.arrayBuffer());
    expect(text).toContain("Unable to parse OTLP traces payload");
  });

  it("an unsupported content type gives 415; malformed OTLP/JSON gives 400 as JSON", async () => {
    const a = await fetch(`${server.url}/v1/traces`, { method: "POST", headers: { "content-type": "text/plain" }, body: "hello" });
    expect(a.status).toBe(415);
    const b = await fetch(`${server.url}/v1/traces`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{not json",
    });
    expect(b.status).toBe(400);
    expect(await b.json()).toMatchObject({ code: 3, message: expect.stringContaining("Unable to parse") });
  });

  it("answers gzipped when the client accepts gzip; spans without ids are reported as partial success", async () => {
    const res = await fetch(`${server.url}/v1/traces`, {
      method: "POST",
      headers: { "content-type": "application/json", "accept-encoding": "gzip" },
      body: JSON.stringify({
        resourceSpans: [
          {
            resource: { attributes: [] },
            scopeSpans: [
              {
                spans: [
                  {
                    traceId: "0af7651916cd43dd8448eb211c80319c",
                    spanId: "b7ad6b7169203331",
                    name: "orphan",
                    startTimeUnixNano: "1700000000000000000",
                    endTimeUnixNano: "1700000001000000000",
                  },
                ],
              },
            ],
          },
        ],
      }),
    });
    expect(res.status).toBe(200);
    // fetch decompresses transparently; the header shows the server compressed.
    expect(res.headers.get("content-encoding")).toBe("gzip");
    expect(await res.json()).toEqual({ partialSuccess: { rejectedSpans: "1", errorMessage: expect.stringContaining("rollout_id") } });
    expect((await store.statistics()).total_spans).toBe(0);
  });
});
