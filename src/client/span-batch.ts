/**
 * The client side of `POST /v1/agl/spans/batch` with `Prefer: return=minimal` (src/server/spans.ts):
 * the server answers each stored span as `[index, sequence_id]` when it is the sent span number `index`
 * exactly as sent, and as the full stored span otherwise, so the spans do not travel back.
 */
import type { Span } from "../types/index.ts";

/** Request headers asking for the minimal answer, and the response header that says it was given. */
export const PREFER_MINIMAL = { prefer: "return=minimal" } as const;
export const PREFERENCE_APPLIED_HEADER = "preference-applied";

/** One entry of the minimal answer (the same shape as `SpanEcho` in src/server/spans.ts). */
export type SpanEcho = [index: number, sequenceId: number] | Span;

/** The stored spans, rebuilt from the JSON text of the request (`{"spans": [...]}`) and the minimal answer. */
export function spansFromEcho(sentBody: string, echo: readonly SpanEcho[]): Span[] {
  let sent: Record<string, unknown>[] | null = null;
  return echo.map((e) => {
    if (!Array.isArray(e)) return e;
    // Parsed from the very text that was sent: the same JSON the server compared with what it stored.
    sent ??= (JSON.parse(sentBody) as { spans: Record<string, unknown>[] }).spans;
    const span = sent[e[0]];
    if (span === undefined) throw new Error(`the server answered span #${e[0]} of a batch of ${sent.length}`);
    span.sequence_id = e[1];
    return span as unknown as Span;
  });
}

/** The sequence ids of a minimal answer (or of a full one: spans carry theirs), in order. */
export const sequenceIdsFromEcho = (echo: readonly SpanEcho[]): number[] => echo.map((e) => (Array.isArray(e) ? e[1] : e.sequence_id));
