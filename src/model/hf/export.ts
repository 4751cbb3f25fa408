/**
 * Our own checkpoints as Hugging Face folders: the weights under HF names (LlamaForCausalLM, or
 * Qwen2/Qwen3 for configs with their features), the byte tokenizer as tokenizer files with its chat
 * template, and generation_config.json with our control ids. `loadPretrained` reads them back to the
 * same logits.
 */
import type { ModelConfig } from "../config.ts";
import type { ModelParams } from "../params.ts";
import { BOS_ID, EOS_ID, PAD_ID } from "../tokenizer.ts";
import { byteTokenizerFiles } from "./byte-tokenizer-files.ts";
import type { HfDtype } from "./tensors.ts";
import { saveHfModel } from "./writer.ts";

export async function exportHf(
  dir: string,
  model: { config: ModelConfig; params: ModelParams },
  options: { dtype?: HfDtype } = {},
): Promise<void> {
  await saveHfModel(dir, {
    config: model.config,
    params: model.params,
    dtype: options.dtype ?? "F32",
    generation: { eosTokenIds: [EOS_ID], bosTokenId: BOS_ID, padTokenId: PAD_ID },
    extraFiles: byteTokenizerFiles(),
  });
}
