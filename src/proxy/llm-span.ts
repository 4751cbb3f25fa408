/**
 * The LLM-call span the policy server stores for each routed request, in the shape upstream's LiteLLM
 * proxy records (`gen_ai.prompt.*`, `gen_ai.completion.*`, `gen_ai.request.*`, `gen_ai.response.*`). It is
 * named `litellm_request`, like the upstream proxy's, and carries the token ids as integer arrays
 * (`prompt_token_ids`, `response_token_ids`; docs/departures.md#13), so `LlmProxyTraceToTriplet` turns it
 * into a triplet unchanged, and `TracerTraceToTriplet({ llmCallMatch: "litellm_request" })` does too.
 * One span per choice; choice i > 0 gets the response id `<id>-<i>` so the adapter keeps every choice.
 */
import type { Attributes, Span } from "../types/span.ts";
import { spanFromAttributes } from "../types/span.ts";
import type { Generation } from "./generation.ts";

export const LLM_CALL_SPAN_NAME = "litellm_request";
/** The policy version that produced the response (a Lightning TS attribute). */
export const POLICY_VERSION_ATTRIBUTE = "lightning.policy.version";
/** log-probs of the sampled tokens under the serving policy (a Lightning TS attribute). */
export const RESPONSE_LOGPROBS_ATTRIBUTE = "response_logprobs";

export interface LlmCallRecord {
  rolloutId: string;
  attemptId: string;
  sequenceId: number;
  /** Chat messages as the model saw them (a completion prompt is recorded as one user message). */
  messages: { role: string; content: string }[];
  request: { model: string; temperature: number; top_p: number; max_tokens: number; n: number };
  responseId: string;
  model: string;
  policyVersion: number;
  promptTokenIds: number[];
  choices: Generation[];
  startTime: number;
  endTime: number;
}

export function choiceResponseId(id: string, index: number): string {
  return index === 0 ? id : `${id}-${index}`;
}

export function llmCallSpans(r: LlmCallRecord): Span[] {
  const common: Attributes = {
    "gen_ai.system": "lightning-ts",
    "gen_ai.request.type": "chat",
    "gen_ai.request.model": r.request.model,
    "gen_ai.request.temperature": r.request.temperature,
    "gen_ai.request.top_p": r.request.top_p,
    "gen_ai.request.max_tokens": r.request.max_tokens,
    "gen_ai.request.n": r.request.n,
    "gen_ai.response.model": r.model,
    [POLICY_VERSION_ATTRIBUTE]: r.policyVersion,
    prompt_token_ids: r.promptTokenIds,
  };
  r.messages.forEach((m, i) => {
    common[`gen_ai.prompt.${i}.role`] = m.role;
    common[`gen_ai.prompt.${i}.content`] = m.content;
  });
  return r.choices.map((c, i) =>
    spanFromAttributes({
      rollout_id: r.rolloutId,
      attempt_id: r.attemptId,
      sequence_id: r.sequenceId,
      name: LLM_CALL_SPAN_NAME,
      start_time: r.startTime,
      end_time: r.endTime,
      attributes: {
        ...common,
        "gen_ai.response.id": choiceResponseId(r.responseId, i),
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.content": c.text,
        "gen_ai.completion.0.finish_reason": c.finishReason,
        "gen_ai.usage.prompt_tokens": r.promptTokenIds.length,
        "gen_ai.usage.completion_tokens": c.tokenIds.length,
        "gen_ai.usage.total_tokens": r.promptTokenIds.length + c.tokenIds.length,
        response_token_ids: c.tokenIds,
        [RESPONSE_LOGPROBS_ATTRIBUTE]: c.logprobs,
      },
    }),
  );
}
