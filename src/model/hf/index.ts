/** Hugging Face model folders: load (config, safetensors, tokenizer, chat template), write and export. */
export { loadPretrained, type PretrainedModel, type LoadOptions, type GenerationDefaults } from "./loader.ts";
export { saveHfModel, hfModelFiles, type SaveHfOptions } from "./writer.ts";
export { exportHf } from "./export.ts";
export { parseHfConfig, toHfConfig, architectureFor, ARCHITECTURES, type HfArchitecture, type HfModelInfo } from "./config.ts";
export { createHfTokenizer, loadHfTokenizer, type HfTokenizerFiles } from "./tokenizer.ts";
export { byteTokenizerFiles } from "./byte-tokenizer-files.ts";
export { HfFormatError } from "./errors.ts";
export { hfTensorName, convertTensor, type HfDtype } from "./tensors.ts";
export { TensorReader, READ_CHUNK_BYTES, type TensorLocation } from "./tensor-reader.ts";
export type { ModelSource, FileSource } from "./source.ts";
export { peftAdapterFiles, savePeftAdapter, loadPeftAdapter, mergeLora, peftTensorName, type PeftAdapter } from "./peft.ts";
export { saveLoraCheckpoint, loadLoraCheckpoint, encodeLoraOptimizer, decodeLoraOptimizer } from "./lora-checkpoint.ts";
