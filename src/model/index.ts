/** The policy model: config contract, presets, init, tokenizer, plain-TS reference, generation, checkpoints. The CPU
 * engine that runs it is `lightning-ts/cpu`, the WebGPU one `lightning-ts/gpu`. */
export {
  headDim,
  type ModelConfig,
  ModelConfigSchema,
  type ParamSpec,
  paramCount,
  paramLayout,
  paramShapes,
  parseModelConfig,
  type RopeScaling,
  RopeScalingSchema,
} from "./config.ts";
export * from "./presets.ts";
export { type ModelParams, type ModelWeights, type ParamViews, paramViews } from "./params.ts";
export { initParams, Rng } from "./init.ts";
export * from "./tokenizer.ts";
export { batchFromTokens } from "./batch.ts";
export * from "./train-types.ts";
export * from "./value-types.ts";
export * from "./value-params.ts";
export * from "./value-checkpoint.ts";
export * from "./value-loss.ts";
export {
  adamwStep,
  backward,
  backwardLora,
  clipGradNorm,
  type DecoderCache,
  decoderBackward,
  decoderForward,
  type ForwardCache,
  type ForwardResult,
  forward,
  globalGradNorm,
  type ModelInput,
  newOptimizerState,
  OPTIMIZER_DEFAULTS,
  positionGradients,
  resolveOptimizerOptions,
  responseValues,
  valueBackward,
  valueForward,
} from "./reference/index.ts";
export {
  CpuDecoder,
  type GenerateOptions,
  type GenerateResult,
  generate,
  logProbOf,
  type SamplingOptions,
  sampledTokenLogProbs,
  sampleToken,
  topLogProbs,
} from "./generate.ts";
export * from "./generation.ts";
export * from "./detokenize.ts";
export {
  decodeSafetensors,
  encodeSafetensors,
  encodeSafetensorsRaw,
  type HeaderEntry,
  type NamedTensor,
  type RawTensor,
  readSafetensorsHeader,
  readTensor,
  type SafetensorsDtype,
  type SafetensorsHeader,
} from "./safetensors.ts";
export * from "./checkpoint.ts";
export * from "./tokenizer-api.ts";
export * from "./hf/index.ts";
export {
  initLora,
  LORA_TARGETS,
  type LoraConfig,
  LoraConfigSchema,
  type LoraTarget,
  type LoraWeights,
  loraLayout,
  loraParamCount,
  parseLoraConfig,
} from "./lora.ts";
export * from "./weights-resource.ts";
