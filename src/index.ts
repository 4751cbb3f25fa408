/**
 * The package root: what a user imports first. The data model, stores and client, the tracer and its
 * emitters, agents and runner, the trainer, the algorithms (GRPO included) and the trace adapters.
 * The specialised parts have their own entries only: `lightning-ts/wasm` (RL kernels), `lightning-ts/model`
 * (the policy model's contracts, reference and files), `lightning-ts/cpu` (CPU engine), `lightning-ts/gpu`
 * (WebGPU engine), `lightning-ts/engine` (picking one of them), `lightning-ts/proxy` (policy serving) and
 * `lightning-ts/server` (the store server's Hono app).
 * test/packaging/exports.test.ts checks that no two of these barrels export the same name (`export *`
 * would silently drop it).
 */
export * from "./types/index.ts";
export * from "./store/index.ts";
export * from "./client/index.ts";
export * from "./tracer/index.ts";
export * from "./runner/index.ts";
export * from "./trainer/index.ts";
export * from "./algorithm/index.ts";
export * from "./adapter/index.ts";
