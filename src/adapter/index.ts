export * from "./types.ts";
export { parsePythonLiteral, tokenIds } from "./python-literal.ts";
export { getRewardValue, isRewardSpan, isRewardOperation, findRewardSpans, findFinalReward, rewardDimensions } from "./reward.ts";
export { agentMatcher, agentName } from "./agent-name.ts";
export { buildTree, type FlatTree } from "./tree.ts";
export { spanToTriplet } from "./span-triplet.ts";
export { TraceTripletAdapter, TracerTraceToTriplet, type TraceTripletOptions } from "./trace-triplet.ts";
export { LlmProxyTraceToTriplet, proxyTokenIds, type LlmProxyTraceToTripletOptions } from "./proxy-triplet.ts";
export { TraceToMessages, groupGenai, type ChatRecord } from "./messages.ts";
export {
  GEN_AI_LLM_OPERATIONS,
  isGenAiLlmCall,
  semconvInputMessages,
  semconvOutputMessages,
  semconvToolDefinitions,
  tokenUsage,
  type TokenUsage,
} from "./semconv.ts";
export {
  buildTrainingBatch,
  checkRowOptions,
  finalReward,
  rolloutFromSpans,
  groupMetrics,
  mergeRuns,
  tokenMetrics,
  trajectoryRow,
  validationMetrics,
  AGGREGATION_LEVELS,
  GROUPINGS,
  type AggregationLevel,
  type BatchBuilderOptions,
  type FinishedRollout,
  type Grouping,
  type TrainingBatch,
} from "./batch.ts";
