/**
 * Picking an engine (`lightning-ts/engine`): `createPolicyTrainer` and `createGenerationEngine` choose
 * WebGPU (`lightning-ts/gpu`) or the CPU (`lightning-ts/cpu`) for the policy trainer and the generation
 * engine; `BatchingEngine` joins concurrent generation calls into one batch.
 */
export { createGenerationEngine, createPolicyTrainer, type CreateTrainerOptions, type GenerationEngineOptions } from "./factory.ts";
export { BatchingEngine } from "./batching.ts";
