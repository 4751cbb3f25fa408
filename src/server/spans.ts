import type { LightningStore } from "../store/base.ts";
import type { Span } from "../types/index.ts";

/** A span that may lack its sequence id (the batch route and OTLP assign it). */
export interface SpanWithOptionalSequence {
  rollout_id: string;
  attempt_id: string;
  sequence_id?: number | null;
  [key: string]: unknown;
}

/**
 * Stores spans in one `addManySpans` call (one transaction), after giving the spans without a sequence
 * id the next ids of their rollouts in one `getManySpanSequenceIds` call, in span order.
 * Ids handed out for a batch that is then rejected are not reused (upstream's next-id call does not
 * validate either; ids only have to grow).
 */
export async function addSpansAssigningSequence(store: LightningStore, spans: readonly SpanWithOptionalSequence[]): Promise<Span[]> {
  const missing: number[] = [];
  spans.forEach((s, i) => {
    if (s.sequence_id === undefined || s.sequence_id === null) missing.push(i);
  });
  if (missing.length === 0) return store.addManySpans(spans as Span[]);
  const ids = await store.getManySpanSequenceIds(missing.map((i) => [spans[i]!.rollout_id, spans[i]!.attempt_id] as const));
  const filled = spans.slice() as Span[];
  missing.forEach((spanIndex, k) => {
    filled[spanIndex] = { ...spans[spanIndex]!, sequence_id: ids[k]! } as Span;
  });
  return store.addManySpans(filled);
}

/**
 * One entry per stored span of a `Prefer: return=minimal` batch answer: `[index, sequence_id]` when the
 * stored span is the request's span number `index` exactly as sent, with that sequence id; the stored
 * span itself otherwise (the store filled defaults or changed it). The client rebuilds the full answer
 * from what it sent, so the server does not serialise every span back (most of a batch's answer).
 */
export type SpanEcho = readonly [index: number, sequenceId: number] | Span;

/** The minimal answer for `stored` (as `addManySpans` returns it: in request order, duplicates left out). */
export function minimalSpanEcho(sent: readonly SpanWithOptionalSequence[], stored: readonly Span[]): SpanEcho[] {
  const out: SpanEcho[] = new Array(stored.length);
  let j = 0;
  for (let k = 0; k < stored.length; k++) {
    const s = stored[k]!;
    // Stored spans keep request order, so the sent one is at or after the last match.
    let i = j;
    while (i < sent.length && !sameSpanIdentity(sent[i]!, s)) i++;
    if (i < sent.length && sameJsonExcept(sent[i]!, s, "sequence_id")) {
      out[k] = [i, s.sequence_id];
      j = i + 1;
    } else {
      out[k] = s;
    }
  }
  return out;
}

const sameSpanIdentity = (a: SpanWithOptionalSequence, b: Span): boolean =>
  a.span_id === b.span_id && a.rollout_id === b.rollout_id && a.attempt_id === b.attempt_id;

/** Equal as JSON: the same keys (undefined values count as absent, as in JSON.stringify) and equal values. */
function sameJsonExcept(a: Record<string, unknown>, b: object, skip?: string): boolean {
  const bb = b as Record<string, unknown>;
  let n = 0;
  for (const k in a) {
    if (k === skip || a[k] === undefined) continue;
    if (!sameJson(a[k], bb[k])) return false;
    n++;
  }
  for (const k in bb) if (k !== skip && bb[k] !== undefined) n--;
  return n === 0;
}

function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return typeof a !== "number" || Number.isFinite(a); // NaN and ±Infinity are not JSON
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!sameJson(a[i], b[i])) return false;
    return true;
  }
  const proto: unknown = Object.getPrototypeOf(b);
  if (Array.isArray(b) || (proto !== Object.prototype && proto !== null)) return false;
  return sameJsonExcept(a as Record<string, unknown>, b);
}
