export * from "./attributes.ts";
export { agentNameFetch, checkAgentName, currentAgentName, MAX_AGENT_NAME_LENGTH, withAgentName } from "./agent-scope.ts";
export * from "./base.ts";
export { DEFAULT_DELIVERY_LIMITS, SpanDeliveryError, isStoreUnavailable, type DeliveryLimits } from "./delivery.ts";
export { installContextManager, ROLLOUT_SCOPE_KEY, ACTIVE_TRACER_KEY } from "./context.ts";
export * from "./emit.ts";
export {
  addLogSink,
  captureLogs,
  getLogger,
  Logger,
  setLogLevel,
  type LogLevel,
  type LogRecord,
  type LogSink,
  type LogWriter,
} from "../platform/log.ts";
export * from "./operation.ts";
export * from "./otel.ts";
export { parameterInfo, parameterNames, type ParamInfo } from "./params.ts";
export { LightningSpanProcessor, lightningSpanProcessor, lightningTracing } from "./processor.ts";
export { RolloutScope, type ScopeOptions } from "./scope.ts";
export {
  instrumentOpenAI,
  OPENAI_CHAT_SPAN_NAME,
  OPENAI_COMPLETION_SPAN_NAME,
  STREAM_ENDED_EARLY_ATTRIBUTE,
  traceOpenAI,
  type OpenAIClassLike,
  type OpenAIClientLike,
  type TraceOpenAIOptions,
} from "./openai.ts";
export { assembleStream, contentAsText, openAiCallAttributes, type JsonObject, type OpenAiCall } from "./gen-ai.ts";
export {
  type AnthropicCall,
  anthropicCallAttributes,
  assembleMessageStream,
  messageAsChatCompletion,
  messagesRequestAsChat,
} from "./anthropic-call.ts";
