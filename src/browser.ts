/**
 * The browser entry (`lightning-ts/browser`, docs/browser.md): what a web page needs to train in a tab,
 * one group per part, and nothing that needs a server runtime. The data model, the in-memory store and
 * the store client, the tracer, the runner and the trainer (runners as concurrent tasks of the page or
 * worker), the trace adapters, the Wasm core, models from URLs or bytes, the WebGPU trainer (the CPU one
 * where WebGPU is missing), generation, the policy server answered in-process, GRPO.
 * test/browser/import-graph.test.ts walks its import graph (src/ and the built dist/) and fails on any
 * `node:*` or Node built-in reached from here; test/packaging/exports.test.ts checks this list against the
 * names docs and examples use. Left out: the libSQL store, the store server, the client-server strategy
 * (processes) and the LLM proxy; the policy server has no port here (InProcessPolicyServer).
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

// The store: in the page, or over HTTP (CORS: the store server's --cors-origin)
export { InMemoryLightningStore } from "./store/memory.ts";
export { LightningStoreClient, StoreConnectionError, StoreHttpError } from "./client/index.ts";

// Tracing: the context follows synchronous calls only here; after an `await`, `tracer.inTrace(fn)`
export { DummyTracer, NoActiveTracerError, OtelTracer, emitReward, getOtelTracer } from "./tracer/index.ts";

// Runners and the trainer: the shared-memory strategy runs them as concurrent tasks of the page (or worker)
export { LitAgent, LitAgentRunner, llmRollout } from "./runner/index.ts";
export { SharedMemoryExecutionStrategy } from "./trainer/shm.ts";
export { Trainer } from "./trainer/trainer.ts";

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
  encodeModel,
  forward,
  type FsAdapter,
  fromLoraWeights,
  fromPolicyWeights,
  initLora,
  LORA_TARGETS,
  type LoraConfig,
  loadPretrained,
  loraWeightsResource,
  type ModelConfig,
  PAD_ID,
  parseLoraConfig,
  type PolicyTrainer,
  policyWeightsResource,
  presetConfig,
  Rng,
  saveCheckpoint,
  TOKENIZER_VOCAB_SIZE,
} from "./model/index.ts";
export { loadPeftAdapter, peftAdapterFiles } from "./model/hf/peft.ts";

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

// Generation and training: the policy a generation engine serves, the policy server's app answered in
// this process, one GRPO update from finished rollouts, and GRPO's whole loop
export { ModelPolicy } from "./proxy/policy.ts";
export { createPolicyApp } from "./proxy/policy-server.ts";
export { InProcessPolicyServer } from "./proxy/in-process.ts";
export { grpoUpdate } from "./algorithm/grpo-step.ts";
export { GRPO, type GrpoReport } from "./algorithm/grpo.ts";
