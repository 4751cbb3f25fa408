/** Compact span construction for adapter tests. */
import { spanFromAttributes, type Attributes, type Span } from "../../src/types/span.ts";

export function sp(o: {
  id: string;
  parent?: string | null;
  name?: string;
  start?: number | null;
  end?: number | null;
  attrs?: Attributes;
  seq?: number;
}): Span {
  return spanFromAttributes({
    span_id: o.id,
    parent_id: o.parent ?? null,
    name: o.name ?? "step",
    start_time: o.start ?? 0,
    end_time: o.end ?? 0,
    attributes: o.attrs ?? {},
    trace_id: "t".repeat(32),
    rollout_id: "ro-1",
    attempt_id: "at-1",
    sequence_id: o.seq ?? 0,
  });
}

export const LLM = "openai.chat.completion";
/** An LLM-call span with token ids. */
export function llm(id: string, parent: string | null, start: number, end: number, extra: Attributes = {}): Span {
  return sp({ id, parent, name: LLM, start, end, attrs: { prompt_token_ids: [1, 2], response_token_ids: [3], ...extra } });
}
export function reward(id: string, parent: string | null, at: number, value: number): Span {
  return sp({
    id,
    parent,
    name: "agentlightning.annotation",
    start: at,
    end: at,
    attrs: { "agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": value },
  });
}
