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
