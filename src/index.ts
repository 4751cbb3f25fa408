/**
 * The package root (`lightning-ts`): what the README and docs/ import first, one group per part, each
 * name written out. Everything else of a part is on its own entry (`lightning-ts/types`, `/store`, `/metrics`,
 * `/client`, `/tracer`, `/runner`, `/trainer`, `/algorithm`, `/adapter`), and the specialised parts are
 * only there: `lightning-ts/server` (the store server's Hono app), `/proxy` (policy server, LLM proxy),
 * `/wasm` (RL kernels), `/model` (the policy model), `/cpu` and `/gpu` (its engines), `/engine` (picking
 * one) and `/browser` (what a web page can import). docs/architecture.md#entries says what each is for.
 * test/packaging/exports.test.ts checks this list against the names README.md, docs/ and examples/ use.
 */

// The data model: wire objects (zod schemas, snake_case as Agent Lightning v0.3), resources, prompt templates
export {
  Attempt,
  AttemptedRollout,
  formatPromptTemplate,
  LLM,
  MissingTemplateVariableError,
  NamedResources,
  NotFoundError,
  PolicyWeights,
  PromptTemplate,
  ProxyLLM,
  renderPromptTemplate,
  ResourcesUpdate,
  Rollout,
  Span,
  SpanCoreFields,
  UnsupportedTemplateEngineError,
  ValidationError,
} from "./types/index.ts";

// Stores: in memory, an embedded libSQL file or a libSQL server, one contract
export { InMemoryLightningStore, LibsqlLightningStore, type LightningStore, openStore } from "./store/index.ts";

// The store over HTTP
export { LightningStoreClient, StoreConnectionError, StoreHttpError } from "./client/index.ts";

// Tracing: the tracer, the emitters, `operation`, OpenAI clients traced, agent names on LLM calls
export {
  agentNameFetch,
  emitAnnotation,
  emitException,
  emitMessage,
  emitObject,
  emitReward,
  instrumentOpenAI,
  NoActiveTracerError,
  OtelTracer,
  operation,
  reward,
  SpanDeliveryError,
  setLogLevel,
  traceOpenAI,
  withAgentName,
} from "./tracer/index.ts";

// Metrics: counters, gauges and histograms in the store server's Prometheus exposition
export { ConsoleMetricsBackend, type MetricsBackend, MultiMetricsBackend, PrometheusMetricsBackend } from "./metrics/index.ts";

// Agents and the runner
export { Hook, LitAgent, LitAgentRunner, llmRollout, promptRollout, RuntimeError, rollout } from "./runner/index.ts";

// The trainer and its strategies
export { ClientServerExecutionStrategy, Trainer } from "./trainer/index.ts";

// Algorithms: your own loop, the baseline, the PPO family (GRPO, ...), SFT and APO
export {
  Algorithm,
  APO,
  ApoModelError,
  type ApoOptions,
  algo,
  Baseline,
  type ChatCompletionsClient,
  createOpenAiClient,
  GRPO,
  type GrpoReport,
  PPO,
  type PpoOptions,
  SFT,
  TrainingMetrics,
  trainSft,
} from "./algorithm/index.ts";

// Adapters: traces to training rows
export {
  buildTrainingBatch,
  type FinishedRollout,
  findFinalReward,
  getRewardValue,
  LlmProxyTraceToTriplet,
  TracerTraceToTriplet,
  TraceToMessages,
  TraceTripletAdapter,
  type Triplet,
} from "./adapter/index.ts";
