/**
 * The plain-TS reference: the model's ops (`ops`), AdamW and the whole model's forward and backward built
 * from them. Every engine is held to it (the CPU engine's Wasm ops, the WebGPU kernels), and it runs on
 * any engine's ops (`ModelOps`, src/model/model-ops.ts) with `{ ops }`.
 */
export * from "./model.ts";
export * as ops from "./ops.ts";
export * from "./optim.ts";
export * from "./value-model.ts";
export * from "./value-head.ts";
