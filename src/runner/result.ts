/**
 * What the runner does with an agent's return value: store it as spans, by its type (the table in
 * docs/runner.md#writing-an-agent).
 */
import type { LightningStore, OtelReadableSpanLike } from "../store/base.ts";
import type { Tracer } from "../tracer/base.ts";
import { emitReward } from "../tracer/emit.ts";
import { getLogger } from "../platform/log.ts";
import { OtelTracer } from "../tracer/otel.ts";
import type { AttemptedRollout, Span, SpanCoreFields } from "../types/index.ts";
import { ValidationError, spanFromAttributes, systemClock } from "../types/index.ts";

const log = getLogger("agentlightning.runner");

/** `Span.from_core_fields`: a new root span (fresh trace and span ids) with the given ids. */
export function spanFromCoreFields(core: SpanCoreFields, rolloutId: string, attemptId: string, sequenceId: number): Span {
  return spanFromAttributes({
    rollout_id: rolloutId,
    attempt_id: attemptId,
    sequence_id: sequenceId,
    name: core.name,
    attributes: core.attributes,
    status: core.status,
    start_time: core.start_time ?? systemClock.now(),
    end_time: core.end_time,
  });
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null;
export const isOtelSpan = (v: unknown): v is OtelReadableSpanLike => isObject(v) && typeof v.spanContext === "function";
export const isStoredSpan = (v: unknown): v is Span =>
  isObject(v) &&
  ["rollout_id", "attempt_id", "span_id", "trace_id"].every((k) => typeof v[k] === "string") &&
  typeof v.sequence_id === "number";
export const isCoreFields = (v: unknown): v is SpanCoreFields =>
  isObject(v) && typeof v.name === "string" && isObject(v.status) && isObject(v.attributes) && !("span_id" in v);

const describe = (v: unknown): string =>
  v === null ? "null" : Array.isArray(v) ? "array" : isObject(v) ? (v.constructor?.name ?? "object") : typeof v;

/** How post-processing runs each store call (the runner's retries while the store is unreachable); `what` names it. */
export type StoreCall = <R>(what: string, fn: () => Promise<R>) => Promise<R>;

const once: StoreCall = (_what, fn) => fn();

/**
 * Stores what the agent returned and gives the spans of this attempt (for logs and hooks). Each store
 * call goes through `call`, so a retried call must not store twice: spans are written with their ids
 * fixed before the first try, and the store skips a repeated (rollout, attempt, span_id).
 */
export async function postProcessRolloutResult(
  store: LightningStore,
  tracer: Tracer,
  rollout: AttemptedRollout,
  raw: unknown,
  call: StoreCall = once,
): Promise<Span[]> {
  const rid = rollout.rollout_id;
  const aid = rollout.attempt.attempt_id;
  if (raw === undefined || raw === null) return tracer.getLastTrace();
  if (typeof raw === "number" || typeof raw === "boolean") {
    if (typeof raw === "boolean") log.warn(`Reward is not a number, got boolean ${raw}; converting it to a float`);
    // The copy is taken before the reward span exists, so the returned list leaves it out (as upstream).
    const spans = [...tracer.getLastTrace()];
    const core = emitReward(Number(raw), { propagate: false });
    const seq = await call("get_next_span_sequence_id", () => store.getNextSpanSequenceId(rid, aid));
    const span = spanFromCoreFields(core, rid, aid, seq);
    await call("add_span", () => store.addSpan(span));
    return spans;
  }
  if (Array.isArray(raw)) {
    if (raw.length === 0) {
      log.warn(`Agent returns an empty list for rollout ${rid}; no spans are added`);
      return [];
    }
    if (raw.every(isOtelSpan)) {
      if (tracer instanceof OtelTracer) {
        log.warn("Tracer is already an OpenTelemetry tracer; adding the returned OpenTelemetry spans again may create duplicate spans");
      }
      const out: Span[] = [];
      for (const s of raw) {
        const stored = await call("add_otel_span", () => store.addOtelSpan(rid, aid, s));
        if (stored === null) log.error(`Failed to add an OpenTelemetry span (${s.name}) to the store for rollout ${rid}`);
        else out.push(stored);
      }
      return out;
    }
    if (raw.every(isStoredSpan)) {
      for (const s of raw) await call("add_span", () => store.addSpan(s));
      return raw;
    }
    if (raw.every(isCoreFields)) {
      const seqs = await call("get_many_span_sequence_ids", () => store.getManySpanSequenceIds(raw.map(() => [rid, aid] as const)));
      const spans = raw.map((core, i) => spanFromCoreFields(core, rid, aid, seqs[i]!));
      await call("add_many_spans", () => store.addManySpans(spans));
      return spans;
    }
    throw new ValidationError(
      `Invalid raw result type: a list of ${[...new Set(raw.map(describe))].join(", ")}; expected all OpenTelemetry spans, all Spans or all SpanCoreFields`,
    );
  }
  throw new TypeError(`Invalid raw result type: ${describe(raw)}; expected nothing, a number, or a list of spans`);
}
