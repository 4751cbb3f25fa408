/**
 * The browser entry (`lightning-ts/browser`, docs/browser.md): everything a web page can use, and nothing
 * that needs a server runtime. The data model, the store client, the trace adapters, the Wasm core, the
 * model (config, CPU reference, Hugging Face files from URLs or bytes, tokenizers, LoRA), the WebGPU
 * trainer, generation, and one GRPO update from finished rollouts.
 * test/browser/import-graph.test.ts walks its import graph (src/ and the built dist/) and fails on any
 * `node:*` or Node built-in reached from here. Left out: the stores, the server, the tracer (OpenTelemetry's
 * SDK and async hooks), the runner, the trainer (processes) and the policy server (an HTTP server).
 */
export * from "./types/index.ts";
export * from "./client/index.ts";
export * from "./adapter/index.ts";
export * from "./wasm/index.ts";
export * from "./model/index.ts";
export * from "./cpu/index.ts";
export * from "./gpu/index.ts";
export * from "./engine/index.ts";
export * from "./proxy/policy.ts";
export { grpoUpdate, selectRows, combineMetrics, type GrpoUpdate, type GrpoUpdateOptions } from "./algorithm/grpo-step.ts";
