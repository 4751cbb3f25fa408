/** Agent Lightning semantic conventions: span names and attribute keys, exact upstream values (docs/tracing.md#span-names-attributes-and-emitters). */

/** Span names (`AGL_*`). */
export const AGL_ANNOTATION = "agentlightning.annotation";
export const AGL_MESSAGE = "agentlightning.message";
export const AGL_OBJECT = "agentlightning.object";
export const AGL_EXCEPTION = "agentlightning.exception";
export const AGL_OPERATION = "agentlightning.operation";
export const AGL_REWARD = "agentlightning.reward";
export const AGL_VIRTUAL = "agentlightning.virtual";

/** Resource attributes (`LightningResourceAttributes`). */
export const LightningResourceAttributes = {
  ROLLOUT_ID: "agentlightning.rollout_id",
  ATTEMPT_ID: "agentlightning.attempt_id",
  SPAN_SEQUENCE_ID: "agentlightning.span_sequence_id",
  TRACER_NAME: "agentlightning.tracer.name",
} as const;

/** Span attributes (`LightningSpanAttributes`); REWARD, LINK, TAG, OPERATION_INPUT are prefixes. */
export const LightningSpanAttributes = {
  REWARD: "agentlightning.reward",
  LINK: "agentlightning.link",
  TAG: "agentlightning.tag",
  MESSAGE_BODY: "agentlightning.message.body",
  OBJECT_TYPE: "agentlightning.object.type",
  OBJECT_LITERAL: "agentlightning.object.literal",
  OBJECT_JSON: "agentlightning.object.json",
  OPERATION_NAME: "agentlightning.operation.name",
  OPERATION_INPUT: "agentlightning.operation.input",
  OPERATION_OUTPUT: "agentlightning.operation.output",
} as const;

/** Keys inside one reward dimension: `agentlightning.reward.<i>.name` / `.value`. */
export const RewardAttributes = { REWARD_NAME: "name", REWARD_VALUE: "value" } as const;
/** Keys inside one AGL link: `agentlightning.link.<i>.key_match` / `.value_match`. */
export const LinkAttributes = { KEY_MATCH: "key_match", VALUE_MATCH: "value_match" } as const;

/** OpenTelemetry exception attributes. */
export const ExceptionAttributes = {
  TYPE: "exception.type",
  MESSAGE: "exception.message",
  ESCAPED: "exception.escaped",
  STACKTRACE: "exception.stacktrace",
} as const;

/** The virtual root the trace tree adds when a trace has several roots. */
export const VIRTUAL_ROOT_ID = "virtual-root";

/** The agent an LLM call belongs to (OpenTelemetry's GenAI conventions): the policy server and the LLM proxy record it from AGENT_NAME_HEADER. */
export const GEN_AI_AGENT_NAME = "gen_ai.agent.name";
/** The request header naming the agent that makes an LLM call (docs/agents.md#training-only-some-agents). */
export const AGENT_NAME_HEADER = "x-agent-name";
