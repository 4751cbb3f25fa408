/**
 * Spans as upstream v0.3.0's Python runner builds them before `add_span` (`Span.model_dump(mode="json")`,
 * fields in declaration order): the reward span of a rollout that returned a float
 * (`Span.from_core_fields(emit_reward(r, propagate=False))`), spans from `SpanCoreFields`, and
 * `Span.from_opentelemetry` of an OpenTelemetry SDK span (what `add_otel_span` sends).
 */
import { randomBytes } from "node:crypto";
import { pyFloat } from "./python-json.ts";
import type { UpstreamSpan } from "./upstream-client.ts";

export const hexId = (bytes: number): string => randomBytes(bytes).toString("hex");

const context = (trace_id: string, span_id: string) => ({ trace_id, span_id, is_remote: false, trace_state: {} });

/** `Span.from_attributes(...)`, which `from_core_fields` calls: random ids, an empty resource, no parent. */
export function spanFromCoreFields(o: {
  rollout_id: string;
  attempt_id: string;
  sequence_id: number;
  name: string;
  attributes: Record<string, unknown>;
  /** `time.time()` at creation: start and end (DummyTracer.create_span). */
  time: number;
  status_code?: "UNSET" | "OK" | "ERROR";
}): UpstreamSpan {
  const trace_id = hexId(16);
  const span_id = hexId(8);
  return {
    rollout_id: o.rollout_id,
    attempt_id: o.attempt_id,
    sequence_id: o.sequence_id,
    trace_id,
    span_id,
    parent_id: null,
    name: o.name,
    status: { status_code: o.status_code ?? "OK", description: null },
    attributes: o.attributes,
    events: [],
    links: [],
    start_time: pyFloat(o.time),
    end_time: pyFloat(o.time),
    context: context(trace_id, span_id),
    parent: null,
    resource: { attributes: {}, schema_url: "" },
  };
}

/** The span `emit_reward(reward, propagate=False)` describes: `agentlightning.annotation` with the flattened reward dimensions. */
export function rewardSpan(o: { rollout_id: string; attempt_id: string; sequence_id: number; reward: number; time: number }): UpstreamSpan {
  return spanFromCoreFields({
    ...o,
    name: "agentlightning.annotation",
    attributes: { "agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": pyFloat(o.reward) },
  });
}

/** The default resource of a Python TracerProvider (`Resource.create()`), as the runner's tracer has it. */
export const PYTHON_SDK_RESOURCE: Readonly<Record<string, string>> = {
  "telemetry.sdk.language": "python",
  "telemetry.sdk.name": "opentelemetry",
  "telemetry.sdk.version": "1.38.0",
  "service.name": "unknown_service",
};

/** `Span.from_opentelemetry(readable_span, rollout_id, attempt_id, sequence_id)` of an SDK span (status unset). */
export function spanFromOpenTelemetry(o: {
  rollout_id: string;
  attempt_id: string;
  sequence_id: number;
  name: string;
  trace_id: string;
  span_id: string;
  parent_span_id: string | null;
  attributes: Record<string, unknown>;
  /** Nanoseconds since the epoch, as the SDK keeps them. */
  start_ns: bigint;
  end_ns: bigint;
  events?: { name: string; attributes: Record<string, unknown>; time_ns: bigint }[];
}): UpstreamSpan {
  const seconds = (ns: bigint) => pyFloat(Number(ns) / 1e9);
  return {
    rollout_id: o.rollout_id,
    attempt_id: o.attempt_id,
    sequence_id: o.sequence_id,
    trace_id: o.trace_id,
    span_id: o.span_id,
    parent_id: o.parent_span_id,
    name: o.name,
    status: { status_code: "UNSET", description: null },
    attributes: o.attributes,
    events: (o.events ?? []).map((e) => ({ name: e.name, attributes: e.attributes, timestamp: seconds(e.time_ns) })),
    links: [],
    start_time: seconds(o.start_ns),
    end_time: seconds(o.end_ns),
    context: context(o.trace_id, o.span_id),
    parent: o.parent_span_id === null ? null : context(o.trace_id, o.parent_span_id),
    resource: { attributes: { ...PYTHON_SDK_RESOURCE }, schema_url: "" },
  };
}
