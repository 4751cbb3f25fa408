/** Serving the policy: the OpenAI-compatible policy server, its LLM-call spans; the LLM proxy. */
export * from "./policy.ts";
export * from "./llm-span.ts";
export * from "./openai-schemas.ts";
export { OpenAiError, platformServe, type ResourceOptions, type ServeFn } from "./openai-http.ts";
export * from "./policy-server.ts";
export * from "./llm-proxy-config.ts";
export { exponentialBackoff, type RetryDelay, UpstreamTimeoutError, UpstreamUnavailableError } from "./upstream-call.ts";
export * from "./llm-proxy.ts";
export { SAMPLING_SEED_KEY, rolloutSamplingSeed } from "./sampling-seed.ts";
// The generation engines a policy server runs on, also here for the imports written before they had homes
// of their own: the contract and detokenizing (lightning-ts/model), the CPU and WebGPU engines
// (lightning-ts/cpu, lightning-ts/gpu), the factory and batching (lightning-ts/engine).
export * from "../model/generation.ts";
export { logProbOf } from "../model/generate.ts";
export * from "../model/detokenize.ts";
export { CpuGenerationEngine, cpuGenerationEngine, referenceGenerationEngine } from "../cpu/generation.ts";
export * from "../gpu/generation.ts";
export { createGenerationEngine, type GenerationEngineOptions } from "../engine/factory.ts";
export { BatchingEngine } from "../engine/batching.ts";
