/** Hugging Face model folders: load (config, safetensors, tokenizer, chat template), write and export. */
export { loadPretrained, readModelInfo, type PretrainedModel, type LoadOptions, type GenerationDefaults } from "./loader.ts";
export { saveHfModel, hfModelFiles, type SaveHfOptions } from "./writer.ts";
export { exportHf } from "./export.ts";
export { parseHfConfig, toHfConfig, ARCHITECTURES, type HfArchitecture, type HfModelInfo } from "./config.ts";
export { createHfTokenizer, loadHfTokenizer, type HfTokenizerFiles } from "./tokenizer.ts";
export { byteTokenizerFiles, byteLevelAlphabet } from "./byte-tokenizer-files.ts";
export { HfFormatError, ModelFolderError } from "./errors.ts";
export type { HfDtype } from "./tensors.ts";
export type { ModelSource, FileSource } from "./source.ts";
export { peftAdapterFiles, savePeftAdapter, loadPeftAdapter, mergeLora, type PeftAdapter } from "./peft.ts";
export { saveLoraCheckpoint, loadLoraCheckpoint, encodeLoraOptimizer, decodeLoraOptimizer } from "./lora-checkpoint.ts";
