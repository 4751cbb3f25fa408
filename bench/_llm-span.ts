/**
 * The span the store benchmarks write: shaped like a runner's LLM-call span (a handful of attributes,
 * one event). Files starting with "_" are helpers that `npm run bench` does not run.
 */
import { spanFromAttributes, type Span } from "../src/types/index.ts";

export function makeLlmSpan(rolloutId: string, attemptId: string, seq: number): Span {
  const span = spanFromAttributes({
    rollout_id: rolloutId,
    attempt_id: attemptId,
    sequence_id: seq,
    name: "openai.chat.completion",
    attributes: {
      "gen_ai.system": "openai",
      "gen_ai.request.model": "qwen2.5-1.5b",
      "gen_ai.usage.prompt_tokens": 123,
      "gen_ai.usage.completion_tokens": 45,
      "gen_ai.prompt.0.content": "What is 2 + 2? Answer with a number.",
      "gen_ai.completion.0.content": "4",
    },
    start_time: 1_800_000_000 + seq,
    end_time: 1_800_000_000.5 + seq,
  });
  span.events = [{ name: "reward", attributes: { value: 1 }, timestamp: 1_800_000_000.2 + seq }];
  return span;
}
