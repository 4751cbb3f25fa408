/** The policy model: config contract, presets, init, tokenizer, plain-TS reference, generation, checkpoints. The CPU
 * engine that runs it is `lightning-ts/cpu`, the WebGPU one `lightning-ts/gpu`. */
export * from "./config.ts";
export * from "./presets.ts";
export * from "./params.ts";
export * from "./init.ts";
export * from "./tokenizer.ts";
export * from "./batch.ts";
export * from "./train-types.ts";
export * from "./reference/index.ts";
export * from "./generate.ts";
export * from "./generation.ts";
export * from "./detokenize.ts";
export * from "./safetensors.ts";
export * from "./checkpoint.ts";
export * from "./tokenizer-api.ts";
export * from "./hf/index.ts";
export * from "./lora.ts";
export * from "./weights-resource.ts";
