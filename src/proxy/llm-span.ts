/**
 * The LLM-call span the policy server stores for each routed request, in the shape upstream's LiteLLM
 * proxy records (`gen_ai.prompt.*`, `gen_ai.completion.*`, `gen_ai.request.*`, `gen_ai.response.*`, built
 * by tracer/gen-ai.ts as the LLM proxy's spans are). It is
 * named `litellm_request`, like the upstream proxy's, and carries the token ids as integer arrays
 * (`prompt_token_ids`, `response_token_ids`; docs/departures.md#13), so `LlmProxyTraceToTriplet` turns it
 * into a triplet unchanged, and `TracerTraceToTriplet({ llmCallMatch: "litellm_request" })` does too.
 * One span per choice; choice i > 0 gets the response id `<id>-<i>` so the adapter keeps every choice.
 */
import { type JsonObject, openAiCallAttributes } from "../tracer/gen-ai.ts";
import type { Attributes, Span } from "../types/span.ts";
import { GEN_AI_AGENT_NAME } from "../types/semconv.ts";
import { spanFromAttributes } from "../types/span.ts";
import type { Generation } from "../model/generation.ts";

export const LLM_CALL_SPAN_NAME = "litellm_request";
/** The policy version that produced the response (a Lightning TS attribute). */
export const POLICY_VERSION_ATTRIBUTE = "lightning.policy.version";
/** Whether the LoRA adapter served the call (false: the frozen base), set when the server chooses per agent (a Lightning TS attribute). */
export const POLICY_ADAPTER_ATTRIBUTE = "lightning.policy.adapter";
/** log-probs of the sampled tokens under the serving policy (a Lightning TS attribute). */
export const RESPONSE_LOGPROBS_ATTRIBUTE = "response_logprobs";

export interface LlmCallRecord {
  rolloutId: string;
  attemptId: string;
  sequenceId: number;
  /** The request as the server ran it: the client's body with the sampling values used (a token-id prompt as its text). */
  request: JsonObject;
  /** The answer's unstreamed body, every choice in it. */
  response: JsonObject;
  policyVersion: number;
  /** The agent the request named (`x-agent-name`), recorded as `gen_ai.agent.name`. */
  agentName?: string | null;
  /** Whether the adapter served the call, when the server chose per agent (else left out). */
  adapter?: boolean | null;
  /** The generations behind the choices (their log-probs are recorded). */
  choices: Generation[];
  startTime: number;
  endTime: number;
}

export function choiceResponseId(id: string, index: number): string {
  return index === 0 ? id : `${id}-${index}`;
}

/** One span per choice, its attributes from gen-ai.ts as the LLM proxy's, plus the policy version and log-probs. */
export function llmCallSpans(r: LlmCallRecord): Span[] {
  const choices = r.response.choices as JsonObject[];
  const promptTokens = (r.response.prompt_token_ids as number[]).length;
  return r.choices.map((g, i) => {
    const one: JsonObject = {
      ...r.response,
      id: choiceResponseId(String(r.response.id), i),
      choices: [{ ...choices[i], index: 0 }],
      usage: { prompt_tokens: promptTokens, completion_tokens: g.tokenIds.length, total_tokens: promptTokens + g.tokenIds.length },
    };
    const attributes: Attributes = {
      "gen_ai.system": "lightning-ts",
      ...openAiCallAttributes({ request: r.request, response: one }),
      [POLICY_VERSION_ATTRIBUTE]: r.policyVersion,
      [RESPONSE_LOGPROBS_ATTRIBUTE]: g.logprobs,
    };
    if (r.agentName != null) attributes[GEN_AI_AGENT_NAME] = r.agentName;
    if (r.adapter != null) attributes[POLICY_ADAPTER_ATTRIBUTE] = r.adapter;
    return spanFromAttributes({
      rollout_id: r.rolloutId,
      attempt_id: r.attemptId,
      sequence_id: r.sequenceId,
      name: LLM_CALL_SPAN_NAME,
      start_time: r.startTime,
      end_time: r.endTime,
      attributes,
    });
  });
}
