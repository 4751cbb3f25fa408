/**
 * OTLP trace request -> store spans, from the message @bufbuild/protobuf decoded, mapped as Agent Lightning's
 * server does so Python tracers see the same store: rollout, attempt and sequence ids come from the
 * `agentlightning.*` attributes (a span's own win over its resource's), ids become lowercase hex, times
 * float seconds; spans without a usable sequence id get one from the store.
 *
 * Choices where upstream leaves a gap or has a quirk:
 * - int64 attribute values become numbers when they are safe integers, else decimal strings (exact; JSON
 *   has no 64-bit integers).
 * - kvlist values are flattened into dotted keys (`k.sub`), because nested objects are not valid span
 *   attributes (upstream's mapping builds them and then fails validation). Unset values are dropped;
 *   arrays that mix types become a JSON string.
 * - `parent` is the parent's span context when there is a parent span id (upstream always sends null);
 *   `context.trace_state` is parsed from the W3C string (upstream drops it).
 * - Spans without a rollout or attempt id are skipped and reported as OTLP partial success.
 */
import type { Attributes, AttributeValue, Span, SpanContext } from "../../types/index.ts";
import { LightningResourceAttributes, convertTimestamp } from "../../types/index.ts";
import { setOwn } from "../../types/own-keys.ts";

/** The decoded message shapes (field local names of @bufbuild/protobuf). */
interface AnyValueMsg {
  value:
    | { case: "stringValue"; value: string }
    | { case: "boolValue"; value: boolean }
    | { case: "intValue"; value: bigint }
    | { case: "doubleValue"; value: number }
    | { case: "arrayValue"; value: { values: AnyValueMsg[] } }
    | { case: "kvlistValue"; value: { values: KeyValueMsg[] } }
    | { case: "bytesValue"; value: Uint8Array }
    | { case: undefined; value?: undefined };
}
interface KeyValueMsg {
  key: string;
  value?: AnyValueMsg;
}
interface SpanMsg {
  traceId: Uint8Array;
  spanId: Uint8Array;
  traceState: string;
  parentSpanId: Uint8Array;
  name: string;
  startTimeUnixNano: bigint;
  endTimeUnixNano: bigint;
  attributes: KeyValueMsg[];
  events: { timeUnixNano: bigint; name: string; attributes: KeyValueMsg[] }[];
  links: { traceId: Uint8Array; spanId: Uint8Array; attributes: KeyValueMsg[] }[];
  status?: { message: string; code: number };
}
export interface TraceRequestMsg {
  resourceSpans: {
    resource?: { attributes: KeyValueMsg[] };
    schemaUrl: string;
    scopeSpans: { spans: SpanMsg[] }[];
  }[];
}

const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, "0"));
export function toHex(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += HEX[b]!;
  return s;
}
const hexId = (bytes: Uint8Array, width: number): string => toHex(bytes).padStart(width, "0");

type Plain = AttributeValue | null | { [k: string]: Plain } | Plain[];

// Recursion is bounded: the protobuf decoder stops at 100 nested messages, and OTLP/JSON bodies are
// refused past MAX_JSON_DEPTH before they are decoded (json-body.ts).
function plainValue(v: AnyValueMsg | undefined): Plain {
  const x = v?.value;
  switch (x?.case) {
    case "stringValue":
    case "boolValue":
    case "doubleValue":
      return x.value;
    case "intValue": {
      const n = Number(x.value);
      return Number.isSafeInteger(n) ? n : x.value.toString();
    }
    case "bytesValue":
      return toHex(x.value);
    case "arrayValue":
      return x.value.values.map(plainValue);
    case "kvlistValue": {
      const o: { [k: string]: Plain } = {};
      for (const kv of x.value.values) setOwn(o, kv.key, plainValue(kv.value));
      return o;
    }
    default:
      return null;
  }
}

function putAttribute(out: Attributes, key: string, v: Plain): void {
  if (v === null) return;
  if (Array.isArray(v)) {
    const kinds = new Set(v.map((e) => (e === null ? "null" : Array.isArray(e) ? "array" : typeof e)));
    const homogeneous = kinds.size <= 1 && !kinds.has("object") && !kinds.has("array") && !kinds.has("null");
    setOwn(out, key, homogeneous ? (v as AttributeValue) : JSON.stringify(v));
    return;
  }
  if (typeof v === "object") {
    for (const [k, sub] of Object.entries(v)) putAttribute(out, `${key}.${k}`, sub);
    return;
  }
  setOwn(out, key, v);
}

export function attributesOf(kvs: readonly KeyValueMsg[]): Attributes {
  const out: Attributes = {};
  for (const kv of kvs) putAttribute(out, kv.key, plainValue(kv.value));
  return out;
}

function traceStateMap(s: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of s.split(",")) {
    const eq = part.indexOf("=");
    if (eq > 0) setOwn(out, part.slice(0, eq).trim(), part.slice(eq + 1).trim());
  }
  return out;
}

const STATUS = ["UNSET", "OK", "ERROR"] as const;

/** A converted span; `sequence_id` is null when the request did not carry a usable one. */
export type OtlpSpan = { [K in keyof Span as K extends "sequence_id" ? never : K & string]: Span[K] } & { sequence_id: number | null };

export interface OtlpConversion {
  spans: OtlpSpan[];
  /** Spans left out because they lack a rollout or attempt id. */
  rejected: number;
}

const idString = (v: AttributeValue | undefined): string | null => (v === undefined || v === "" ? null : String(v));

/** `int(str(value))` as upstream; unparsable or negative values count as missing, 0 is kept. */
function sequenceOf(v: AttributeValue | undefined): number | null {
  if (v === undefined) return null;
  const s = String(v).trim();
  if (!/^[+-]?\d+$/.test(s)) return null;
  const n = Number(s);
  return Number.isSafeInteger(n) && n >= 0 ? n : null;
}

export function spansFromOtlp(req: TraceRequestMsg): OtlpConversion {
  const spans: OtlpSpan[] = [];
  let rejected = 0;
  const R = LightningResourceAttributes;
  for (const rs of req.resourceSpans) {
    const resourceAttrs = attributesOf(rs.resource?.attributes ?? []);
    for (const ss of rs.scopeSpans) {
      for (const s of ss.spans) {
        const attributes = attributesOf(s.attributes);
        // Span-level ids win over resource-level ones (upstream MUST).
        const pick = (k: string) => (k in attributes ? attributes[k] : resourceAttrs[k]);
        const rolloutId = idString(pick(R.ROLLOUT_ID));
        const attemptId = idString(pick(R.ATTEMPT_ID));
        if (rolloutId === null || attemptId === null) {
          rejected++;
          continue;
        }
        const trace_id = hexId(s.traceId, 32);
        const span_id = hexId(s.spanId, 16);
        const parent_id = s.parentSpanId.length ? hexId(s.parentSpanId, 16) : null;
        const context: SpanContext = { trace_id, span_id, is_remote: false, trace_state: traceStateMap(s.traceState) };
        spans.push({
          rollout_id: rolloutId,
          attempt_id: attemptId,
          sequence_id: sequenceOf(pick(R.SPAN_SEQUENCE_ID)),
          trace_id,
          span_id,
          parent_id,
          name: s.name,
          status: { status_code: STATUS[s.status?.code ?? 0] ?? "UNSET", description: s.status?.message || null },
          attributes,
          events: s.events.map((e) => ({
            name: e.name,
            attributes: attributesOf(e.attributes),
            timestamp: convertTimestamp(e.timeUnixNano),
          })),
          links: s.links.map((l) => {
            const attrs = attributesOf(l.attributes);
            return {
              context: { trace_id: hexId(l.traceId, 32), span_id: hexId(l.spanId, 16), is_remote: false, trace_state: {} },
              attributes: Object.keys(attrs).length ? attrs : null,
            };
          }),
          start_time: convertTimestamp(s.startTimeUnixNano),
          end_time: convertTimestamp(s.endTimeUnixNano),
          context,
          parent: parent_id === null ? null : { trace_id, span_id: parent_id, is_remote: false, trace_state: {} },
          resource: { attributes: resourceAttrs, schema_url: rs.schemaUrl ?? "" },
        });
      }
    }
  }
  return { spans, rejected };
}
