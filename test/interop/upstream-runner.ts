/**
 * Upstream v0.3.0's Python runner loop (agentlightning/runner/agent.py `LitAgentRunner` with the
 * `OtelTracer`), replayed on top of the replayed client: what one worker sends to the store.
 * - `iter`: dequeue with the worker's id (`Worker-<n>`); an empty answer means poll again.
 * - `_step_impl`: the rollout's resources by id, or the latest when it has none (missing resources:
 *   an ERROR log and the rollout is skipped, its attempt left as it is); the agent runs inside the
 *   tracer, whose `LightningStoreOTLPExporter` behind a `SimpleSpanProcessor` posts each span as it
 *   ends to `/v1/traces` (protobuf, one span per request, the rollout and attempt ids merged into the
 *   resource); then `_post_process_rollout_result`; then `update_attempt(status=...)`.
 * - `_post_process_rollout_result`: a float result adds a reward span (`get_next_span_sequence_id`,
 *   `add_span`); a list of `SpanCoreFields` gets ids from `get_many_span_sequence_ids` and goes through
 *   `add_many_spans`; a list of SDK spans goes through `add_otel_span` one by one.
 * - heartbeats: `update_worker(worker_id, system_snapshot())`, on a timer upstream, here when asked.
 */
import { ROOT_CONTEXT, trace, type Tracer } from "@opentelemetry/api";
import { ProtobufTraceSerializer } from "@opentelemetry/otlp-transformer";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { gunzipSync } from "node:zlib";
import { request } from "undici";
import { pyFloat } from "./python-json.ts";
import type { Exchange, UpstreamSpan, UpstreamStoreClient } from "./upstream-client.ts";
import { PYTHON_SDK_RESOURCE, rewardSpan, spanFromCoreFields, spanFromOpenTelemetry } from "./upstream-spans.ts";

/** What python-requests sends for the OTLP exporter (opentelemetry-exporter-otlp-proto-http 1.38). */
export const OTLP_EXPORTER_HEADERS: Readonly<Record<string, string>> = {
  "user-agent": "OTel-OTLP-Exporter-Python/1.38.0",
  "accept-encoding": "gzip, deflate",
  accept: "*/*",
  "content-type": "application/x-protobuf",
};

/** `SpanCoreFields` an agent may return. */
export interface CoreFields {
  name: string;
  attributes: Record<string, unknown>;
}

export type AgentResult = number | null | { coreFields: CoreFields[] } | { otelSpans: ReadableSpan[] };

export interface AgentCall {
  input: unknown;
  resources: Record<string, unknown>;
  rollout: { rollout_id: string; attempt: { attempt_id: string; sequence_id: number } };
  /** The tracer of the rollout's trace context: spans it ends are exported to the store at once. */
  tracer: Tracer;
}

export type Agent = (call: AgentCall) => Promise<AgentResult> | AgentResult;

/** `system_snapshot()` without GPUs: the keys and types upstream's heartbeat carries. */
export const systemSnapshot = (): Record<string, unknown> => ({
  timestamp: new Date().toISOString().slice(0, 19),
  host: "runner-host",
  os: "Linux-6.8.0-x86_64-with-glibc2.39",
  cpu_name: "x86_64",
  cpu_cores: 8,
  cpu_threads: 16,
  cpu_usage_pct: pyFloat(3.5),
  mem_used_gb: pyFloat(7.81),
  mem_total_gb: pyFloat(62.7),
  mem_pct: pyFloat(12.4),
  disk_used_gb: pyFloat(120.5),
  disk_total_gb: pyFloat(512),
  disk_pct: pyFloat(23.5),
  bytes_sent_mb: pyFloat(1.25),
  bytes_recv_mb: pyFloat(2.5),
});

/** The OTLP/HTTP protobuf exporter of the Python SDK: one POST per export call, logged next to the client's requests. */
class PythonOtlpExporter {
  private pending: Promise<void>[] = [];

  constructor(
    private readonly endpoint: string,
    private readonly log: Exchange[],
    private readonly extraHeaders: Record<string, string>,
  ) {}

  export(spans: ReadableSpan[], done: (r: { code: number; error?: Error }) => void): void {
    const body = ProtobufTraceSerializer.serializeRequest(spans)!;
    const headers = { ...OTLP_EXPORTER_HEADERS, ...this.extraHeaders };
    // Python's SimpleSpanProcessor exports in `on_end`, one span after the other: the next POST starts only
    // once the previous answer is in, so the server sees spans in the order they ended.
    const previous = this.pending.at(-1) ?? Promise.resolve();
    const sent = previous
      .then(() => request(this.endpoint, { method: "POST", headers, body }))
      .then(async (res) => {
        const raw = Buffer.from(await res.body.arrayBuffer());
        const encoding = String(res.headers["content-encoding"] ?? "");
        const answer = encoding === "gzip" ? gunzipSync(raw) : raw;
        this.log.push({
          method: "otlp_export",
          request: { method: "POST", url: "/v1/traces", headers, body: `<${body.length} protobuf bytes, ${spans.length} span(s)>` },
          answer: {
            status: res.statusCode,
            contentType: String(res.headers["content-type"] ?? ""),
            text: answer.toString("hex"),
            json: encoding,
          },
        });
        done({ code: res.statusCode >= 200 && res.statusCode < 300 ? 0 : 1 });
      })
      .catch((error: Error) => done({ code: 1, error }));
    this.pending.push(sent);
  }

  /** Python's SimpleSpanProcessor blocks in `on_end` until the export is done; here the runner awaits this. */
  async flush(): Promise<void> {
    const all = this.pending;
    this.pending = [];
    await Promise.all(all);
  }

  shutdown(): Promise<void> {
    return this.flush();
  }

  forceFlush(): Promise<void> {
    return this.flush();
  }
}

export interface UpstreamRunnerOptions {
  workerId: number;
  /** The store server root, for the OTLP endpoint (`store.otlp_traces_endpoint()`). */
  serverAddress: string;
  /** Headers for the OTLP exporter (`OTEL_EXPORTER_OTLP_HEADERS`), e.g. the bearer token. */
  otlpHeaders?: Record<string, string>;
}

export class UpstreamRunner {
  readonly workerLabel: string;
  /** ERROR lines upstream's runner would log (never with a traceback on these paths). */
  readonly errors: string[] = [];

  constructor(
    private readonly store: UpstreamStoreClient,
    private readonly agent: Agent,
    private readonly options: UpstreamRunnerOptions,
  ) {
    this.workerLabel = `Worker-${options.workerId}`;
  }

  /** One tick of the heartbeat loop. */
  heartbeat() {
    return this.store.update_worker(this.workerLabel, systemSnapshot());
  }

  /** The claim loop until a dequeue comes back empty (upstream polls on; its stop event is set then). */
  async iterUntilQueueEmpty(): Promise<string[]> {
    const done: string[] = [];
    for (;;) {
      const next = await this.store.dequeue_rollout(this.workerLabel);
      if (next === null) return done;
      done.push(await this.stepImpl(next));
    }
  }

  async stepImpl(rollout: NonNullable<Awaited<ReturnType<UpstreamStoreClient["dequeue_rollout"]>>>): Promise<string> {
    const rid = rollout.rollout_id;
    const aid = rollout.attempt.attempt_id;
    const resources = rollout.resources_id
      ? await this.store.get_resources_by_id(rollout.resources_id)
      : await this.store.get_latest_resources();
    if (!resources) {
      this.errors.push(`[Worker ${this.options.workerId} | Rollout ${rid}] Failed to fetch resources. Skipping.`);
      return rid;
    }
    let failed = false;
    const exporter = new PythonOtlpExporter(
      `${this.options.serverAddress}/v1/traces`,
      this.store.exchanges,
      this.options.otlpHeaders ?? {},
    );
    const provider = new BasicTracerProvider({
      resource: resourceFromAttributes({ ...PYTHON_SDK_RESOURCE, "agentlightning.rollout_id": rid, "agentlightning.attempt_id": aid }),
      spanProcessors: [new SimpleSpanProcessor(exporter)],
    });
    try {
      const tracer = provider.getTracer("agentlightning.tracer.otel");
      let result: AgentResult;
      try {
        result = await this.agent({ input: rollout.input, resources: resources.resources, rollout, tracer });
      } finally {
        await exporter.flush();
      }
      await this.postProcess(rid, aid, result);
    } catch (err) {
      this.errors.push(`[Worker ${this.options.workerId} | Rollout ${rid}] Exception during rollout: ${String(err)}`);
      failed = true;
    } finally {
      await provider.shutdown();
    }
    await this.store.update_attempt(rid, aid, { status: failed ? "failed" : "succeeded" });
    return rid;
  }

  private async postProcess(rid: string, aid: string, result: AgentResult): Promise<void> {
    if (result === null) return;
    if (typeof result === "number") {
      const sequence_id = await this.store.get_next_span_sequence_id(rid, aid);
      await this.store.add_span(rewardSpan({ rollout_id: rid, attempt_id: aid, sequence_id, reward: result, time: Date.now() / 1000 }));
      return;
    }
    if ("coreFields" in result) {
      const ids = await this.store.get_many_span_sequence_ids(result.coreFields.map(() => [rid, aid] as const));
      const spans: UpstreamSpan[] = result.coreFields.map((c, i) =>
        spanFromCoreFields({ rollout_id: rid, attempt_id: aid, sequence_id: ids[i]!, ...c, time: Date.now() / 1000 }),
      );
      await this.store.add_many_spans(spans);
      return;
    }
    for (const s of result.otelSpans) {
      const added = await this.store.add_otel_span(rid, aid, (sequence_id) => otelToUpstream(s, rid, aid, sequence_id));
      if (added === null) this.errors.push(`Failed to add OpenTelemetry span to the store: ${s.name}`);
    }
  }
}

/** `Span.from_opentelemetry` of a JS SDK span (the same fields as the Python SDK's). */
function otelToUpstream(s: ReadableSpan, rollout_id: string, attempt_id: string, sequence_id: number): UpstreamSpan {
  const ns = ([sec, nano]: [number, number]) => BigInt(sec) * 1_000_000_000n + BigInt(nano);
  const ctx = s.spanContext();
  return spanFromOpenTelemetry({
    rollout_id,
    attempt_id,
    sequence_id,
    name: s.name,
    trace_id: ctx.traceId,
    span_id: ctx.spanId,
    parent_span_id: s.parentSpanContext?.spanId ?? null,
    attributes: { ...s.attributes },
    start_ns: ns(s.startTime),
    end_ns: ns(s.endTime),
    events: s.events.map((e) => ({ name: e.name, attributes: { ...(e.attributes ?? {}) }, time_ns: ns(e.time) })),
  });
}

/** Spans made by a tracer that exports nowhere (what an agent returning SDK spans hands back). */
export function untracedSpans(make: (tracer: Tracer) => void): ReadableSpan[] {
  const memory = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(memory)] });
  make(provider.getTracer("user"));
  return memory.getFinishedSpans();
}

/** A child span of `parent` in the same trace. */
export const childOf = (
  tracer: Tracer,
  parent: ReturnType<Tracer["startSpan"]>,
  name: string,
  attributes: Record<string, string | number> = {},
) => tracer.startSpan(name, { attributes }, trace.setSpan(ROOT_CONTEXT, parent));
