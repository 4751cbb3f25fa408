import { z } from "zod";
import { StatusCode } from "./enums.ts";
import { newSpanId, newTraceId } from "./ids.ts";

export const AttributeValue = z.union([
  z.string(),
  z.boolean(),
  z.number(),
  z.array(z.string()),
  z.array(z.boolean()),
  z.array(z.number()),
]);
export type AttributeValue = z.infer<typeof AttributeValue>;

export const Attributes = z.record(z.string(), AttributeValue);
export type Attributes = z.infer<typeof Attributes>;

export const TraceStatus = z.looseObject({
  status_code: StatusCode,
  description: z.string().nullable().default(null),
});
export type TraceStatus = z.infer<typeof TraceStatus>;

export const SpanContext = z.looseObject({
  trace_id: z.string(),
  span_id: z.string(),
  is_remote: z.boolean(),
  trace_state: z.record(z.string(), z.string()),
});
export type SpanContext = z.infer<typeof SpanContext>;

export const SpanEvent = z.looseObject({
  name: z.string(),
  attributes: Attributes,
  timestamp: z.number().nullable().default(null),
});
export type SpanEvent = z.infer<typeof SpanEvent>;

export const SpanLink = z.looseObject({
  context: SpanContext,
  attributes: Attributes.nullable().default(null),
});
export type SpanLink = z.infer<typeof SpanLink>;

/** Extra keys are dropped, as upstream does. */
export const OtelResource = z.object({
  attributes: Attributes,
  schema_url: z.string(),
});
export type OtelResource = z.infer<typeof OtelResource>;

/** A nullable field whose key must be present, as in upstream's model (zod's nullable rejects undefined). */
const nullableRequired = <T extends z.ZodType>(t: T) => t.nullable();

/** A stored trace span. Extra keys are allowed and survive a round trip. */
export const Span = z.looseObject({
  rollout_id: z.string(),
  attempt_id: z.string(),
  sequence_id: z.number().int(),
  trace_id: z.string(),
  span_id: z.string(),
  parent_id: nullableRequired(z.string()),
  name: z.string(),
  status: TraceStatus,
  attributes: Attributes,
  events: z.array(SpanEvent),
  links: z.array(SpanLink),
  start_time: nullableRequired(z.number()),
  end_time: nullableRequired(z.number()),
  context: nullableRequired(SpanContext),
  parent: nullableRequired(SpanContext),
  resource: OtelResource,
});
export type Span = z.infer<typeof Span>;

/** The model fields of a Span, in order (the server checks `sort_by` against them; extra keys are not among them). */
export const SPAN_FIELDS: readonly (keyof typeof Span.shape)[] = Span.keyof().options;

export interface SpanFromAttributesOptions {
  rollout_id?: string;
  attempt_id?: string;
  sequence_id?: number;
  trace_id?: string;
  span_id?: string;
  parent_id?: string | null;
  name?: string;
  attributes?: Attributes;
  start_time?: number | null;
  end_time?: number | null;
  status?: TraceStatus;
}

/** A synthetic span, as upstream's `Span.from_attributes`. */
export function spanFromAttributes(o: SpanFromAttributesOptions = {}): Span {
  const trace_id = o.trace_id ?? newTraceId();
  const span_id = o.span_id ?? newSpanId();
  const parent_id = o.parent_id ?? null;
  return {
    rollout_id: o.rollout_id ?? "",
    attempt_id: o.attempt_id ?? "",
    sequence_id: o.sequence_id ?? 0,
    trace_id,
    span_id,
    parent_id,
    name: o.name ?? "agentlightning.virtual",
    status: o.status ?? { status_code: "OK", description: null },
    attributes: o.attributes ?? {},
    events: [],
    links: [],
    start_time: o.start_time ?? null,
    end_time: o.end_time ?? null,
    context: { trace_id, span_id, is_remote: false, trace_state: {} },
    parent: parent_id === null ? null : { trace_id, span_id: parent_id, is_remote: false, trace_state: {} },
    resource: { attributes: {}, schema_url: "" },
  };
}

/** The fields a runner supplies when it records a span by hand. */
export const SpanCoreFields = z.object({
  name: z.string(),
  status: TraceStatus,
  attributes: Attributes,
  start_time: z.number().nullable(),
  end_time: z.number().nullable(),
});
export type SpanCoreFields = z.infer<typeof SpanCoreFields>;
