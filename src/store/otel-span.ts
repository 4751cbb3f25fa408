/**
 * Converts an OpenTelemetry SDK span (`ReadableSpan`, structurally) to a store Span, as upstream's
 * `Span.from_opentelemetry`: ids as 32/16 lowercase hex, hrtime tuples to float seconds (0 gives null),
 * status codes 0/1/2 to UNSET/OK/ERROR.
 */
import type { Attributes, Span, SpanContext, SpanEvent, SpanLink, StatusCode } from "../types/index.ts";
import { convertTimestamp } from "../types/index.ts";
import type { OtelReadableSpanLike } from "./base.ts";
import { setOwn } from "../types/own-keys.ts";

type HrTime = readonly [number, number] | number | null | undefined;

/** An OTel hrtime `[seconds, nanoseconds]` (or a plain number) as float seconds; zero/missing gives null. */
export function hrTimeToSeconds(t: HrTime): number | null {
  if (t === null || t === undefined) return null;
  if (typeof t === "number") return convertTimestamp(t);
  return convertTimestamp(t[0] + t[1] / 1e9);
}

const hexId = (id: string | undefined | null, width: number): string => (id ?? "").toLowerCase().padStart(width, "0").slice(-width);

/** Parses a W3C `tracestate` string (`k1=v1,k2=v2`) into a map. */
function traceStateMap(ts: { serialize(): string } | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (!ts) return out;
  for (const part of ts.serialize().split(",")) {
    const eq = part.indexOf("=");
    if (eq > 0) setOwn(out, part.slice(0, eq).trim(), part.slice(eq + 1).trim());
  }
  return out;
}

interface OtelContextLike {
  traceId: string;
  spanId: string;
  isRemote?: boolean;
  traceState?: { serialize(): string };
}

function spanContext(c: OtelContextLike): SpanContext {
  return {
    trace_id: hexId(c.traceId, 32),
    span_id: hexId(c.spanId, 16),
    is_remote: c.isRemote ?? false,
    trace_state: traceStateMap(c.traceState),
  };
}

/** Copies attributes, dropping undefined values (OTel allows them; the Span model does not). */
function attributes(a: Record<string, unknown> | undefined): Attributes {
  const out: Record<string, unknown> = {};
  // setOwn: an attribute named "__proto__" is an ordinary key.
  if (a) for (const [k, v] of Object.entries(a)) if (v !== undefined && v !== null) setOwn(out, k, Array.isArray(v) ? [...v] : v);
  return out as Attributes;
}

const STATUS_CODES: readonly StatusCode[] = ["UNSET", "OK", "ERROR"];

export function spanFromOpenTelemetry(span: OtelReadableSpanLike, rolloutId: string, attemptId: string, sequenceId: number): Span {
  const ctx = span.spanContext() as OtelContextLike | undefined;
  const context = ctx ? spanContext(ctx) : null;
  const parentCtx = span.parentSpanContext as OtelContextLike | undefined;
  let parent: SpanContext | null = null;
  if (parentCtx) parent = spanContext(parentCtx);
  else if (span.parentSpanId) {
    parent = { trace_id: context?.trace_id ?? "0".repeat(32), span_id: hexId(span.parentSpanId, 16), is_remote: false, trace_state: {} };
  }
  const events: SpanEvent[] = (span.events ?? []).map((e) => ({
    name: e.name,
    attributes: attributes(e.attributes),
    timestamp: hrTimeToSeconds(e.time),
  }));
  const links: SpanLink[] = (span.links ?? []).map((l) => ({
    context: spanContext(l.context as OtelContextLike),
    attributes: l.attributes ? attributes(l.attributes) : null,
  }));
  return {
    rollout_id: rolloutId,
    attempt_id: attemptId,
    sequence_id: sequenceId,
    trace_id: context?.trace_id ?? "0".repeat(32),
    span_id: context?.span_id ?? "0".repeat(16),
    parent_id: parent?.span_id ?? null,
    name: span.name,
    status: { status_code: STATUS_CODES[span.status?.code ?? 0] ?? "UNSET", description: span.status?.message ?? null },
    attributes: attributes(span.attributes),
    events,
    links,
    start_time: hrTimeToSeconds(span.startTime),
    end_time: hrTimeToSeconds(span.endTime),
    context,
    parent,
    resource: { attributes: attributes(span.resource?.attributes), schema_url: span.resource?.schemaUrl ?? "" },
  };
}
