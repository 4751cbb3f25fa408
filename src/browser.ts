/**
 * The browser entry (`lightning-ts/browser`, docs/browser.md): what a web page needs to train in a tab,
 * one group per part, and nothing that needs a server runtime. The data model, the store client, the trace
 * adapters, the Wasm core, models from URLs or bytes, the WebGPU trainer (the CPU one where WebGPU is
 * missing), generation, and one GRPO update from finished rollouts.
 * test/browser/import-graph.test.ts walks its import graph (src/ and the built dist/) and fails on any
 * `node:*` or Node built-in reached from here; test/packaging/exports.test.ts checks this list against the
 * names docs and examples use. Left out: the stores, the server, the tracer (OpenTelemetry's SDK and async
 * hooks), the runner, the trainer (processes) and the policy server (an HTTP server).
 */

// The data model: wire objects, resources, errors
export {
  Attempt,
  AttemptedRollout,
  LLM,
  NamedResources,
  NotFoundError,
  PolicyWeights,
  PromptTemplate,
  ResourcesUpdate,
  Rollout,
  Span,
  spanFromAttributes,
  ValidationError,
} from "./types/index.ts";

// The store over HTTP (CORS: the store server's --cors-origin)
export { LightningStoreClient, StoreConnectionError, StoreHttpError } from "./client/index.ts";

// Adapters: traces to training rows
export {
  buildTrainingBatch,
  type FinishedRollout,
  LlmProxyTraceToTriplet,
  TracerTraceToTriplet,
  TraceToMessages,
  TraceTripletAdapter,
  type Triplet,
} from "./adapter/index.ts";

// The Wasm core (embedded: no .wasm file to serve)
export { libraryKernels, loadWasmCore } from "./wasm/index.ts";

// The model: config, token batches, checkpoints and Hugging Face files from bytes or URLs, weights as resources
export {
  batchFromTokens,
  decodeModel,
  decodeOptimizer,
  type FsAdapter,
  fromLoraWeights,
  fromPolicyWeights,
  initLora,
  type LoraConfig,
  loadPretrained,
  loraWeightsResource,
  type ModelConfig,
  PAD_ID,
  policyWeightsResource,
  presetConfig,
  Rng,
  saveCheckpoint,
  TOKENIZER_VOCAB_SIZE,
} from "./model/index.ts";

// The engines: WebGPU, the CPU where there is none, and the factories that pick one
export {
  GpuDeviceLostError,
  GpuGenerationEngine,
  GpuOutOfMemoryError,
  GpuPolicyTrainer,
  GpuUnavailableError,
  probeGpu,
  requestGpuDevice,
} from "./gpu/index.ts";
export { CpuTrainer } from "./cpu/index.ts";
export { createGenerationEngine, createPolicyTrainer } from "./engine/index.ts";

// Generation and training: the policy a generation engine serves, one GRPO update from finished rollouts
export { ModelPolicy } from "./proxy/policy.ts";
export { grpoUpdate } from "./algorithm/grpo-step.ts";
