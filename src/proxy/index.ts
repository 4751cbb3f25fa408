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
export * from "./in-process.ts";
