/**
 * The Calc-X policy's tokenizer: a byte-level BPE trained here, deterministically, on reference
 * conversations rendered with the chat template (chat-template.ts), written as Hugging Face
 * `tokenizer.json` + `tokenizer_config.json`. Qwen2's normalizer, pre-tokenizer (digits one by one, so
 * numbers stay digit sequences) and decoder; ids 0-255 are the bytes, then the merges in the order they
 * were learnt, then the added tokens (`<|endoftext|>`, `<|im_start|>`, `<|im_end|>` special; the four
 * tool tags not, as in Qwen2.5, so they survive decoding for the tool-call parser).
 *
 * Training: the text is split at the added tokens, normalised and pre-tokenised by `@huggingface/tokenizers`
 * itself (the code that will encode with the result), then the most frequent adjacent pair is merged
 * until `vocabSize` or until no pair occurs twice; ties go to the smaller pair in code-unit order.
 */
import { Tokenizer as HfTokenizerImpl } from "@huggingface/tokenizers";
import { ChatTemplate } from "../../src/model/hf/chat-template.ts";
import { byteLevelAlphabet, createHfTokenizer } from "../../src/model/index.ts";
import { CHAT_TEMPLATE, EOS_TOKEN, PAD_TOKEN, SPECIAL_TOKENS, TOOL_TOKENS } from "./chat-template.ts";
import { referenceConversation, TOOLS } from "./conversations.ts";
import { trainTasks } from "./tasks.ts";

/** Qwen2's pre-tokenizer split (tokenizer.json's Oniguruma syntax): words, single digits, punctuation runs, spaces. */
export const QWEN2_SPLIT =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const BYTE_LEVEL = { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false };

const ADDED: Array<{ content: string; special: boolean }> = [
  ...SPECIAL_TOKENS.map((content) => ({ content, special: true })),
  ...TOOL_TOKENS.map((content) => ({ content, special: false })),
];

export interface BpeModel {
  /** Token strings (byte-level alphabet) in id order: the 256 bytes, then one per merge. */
  tokens: string[];
  /** Merges in rank order, each `[left, right]`. */
  merges: Array<[string, string]>;
  /** The pre-tokenizer's split pattern (Oniguruma syntax) [QWEN2_SPLIT]. */
  split?: string;
}

/** `tokenizer.json` of a byte-level BPE in Qwen2's shape (as an object). */
export function tokenizerJson(bpe: BpeModel): Record<string, unknown> {
  const vocab: Record<string, number> = {};
  bpe.tokens.forEach((t, id) => {
    vocab[t] = id;
  });
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: ADDED.map((t, i) => ({
      id: bpe.tokens.length + i,
      content: t.content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: t.special,
    })),
    normalizer: { type: "NFC" },
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [{ type: "Split", pattern: { Regex: bpe.split ?? QWEN2_SPLIT }, behavior: "Isolated", invert: false }, BYTE_LEVEL],
    },
    post_processor: BYTE_LEVEL,
    decoder: BYTE_LEVEL,
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: "",
      end_of_word_suffix: "",
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges: bpe.merges.map(([a, b]) => `${a} ${b}`),
    },
  };
}

/** `tokenizer_config.json` (as an object): the chat template and the special-token strings. */
export function tokenizerConfig(bpe: BpeModel, modelMaxLength = 256): Record<string, unknown> {
  return {
    tokenizer_class: "PreTrainedTokenizerFast",
    bos_token: null,
    eos_token: EOS_TOKEN,
    pad_token: PAD_TOKEN,
    unk_token: null,
    add_bos_token: false,
    add_prefix_space: false,
    additional_special_tokens: SPECIAL_TOKENS.filter((t) => t !== PAD_TOKEN),
    clean_up_tokenization_spaces: false,
    split_special_tokens: false,
    errors: "replace",
    model_max_length: modelMaxLength,
    chat_template: CHAT_TEMPLATE,
    added_tokens_decoder: Object.fromEntries(
      ADDED.map((t, i) => [
        String(bpe.tokens.length + i),
        { content: t.content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: t.special },
      ]),
    ),
  };
}

/** The two tokenizer files as JSON text, for a model folder (`modelMaxLength`: the model's context). */
export function tokenizerFiles(bpe: BpeModel, modelMaxLength = 256): { "tokenizer.json": string; "tokenizer_config.json": string } {
  return {
    "tokenizer.json": `${JSON.stringify(tokenizerJson(bpe), null, 1)}\n`,
    "tokenizer_config.json": `${JSON.stringify(tokenizerConfig(bpe, modelMaxLength), null, 2)}\n`,
  };
}

/** Pre-tokens of `texts` (byte-level strings) with their counts, split and normalised as the tokenizer will. */
function wordCounts(texts: readonly string[], split?: string): Map<string, number> {
  const base = new HfTokenizerImpl(tokenizerJson({ tokens: byteLevelAlphabet(), merges: [], split }), {});
  const added = new RegExp(ADDED.map((t) => t.content.replace(/[|/]/g, "\\$&")).join("|"), "g");
  const counts = new Map<string, number>();
  for (const text of texts)
    for (const segment of text.split(added)) {
      if (segment.length === 0) continue;
      for (const word of base.pre_tokenizer!.pre_tokenize(base.normalizer!(segment))) counts.set(word, (counts.get(word) ?? 0) + 1);
    }
  return counts;
}

/** BPE merges learnt from `texts` (see the header for the rule), pre-tokenized by `split` [QWEN2_SPLIT]. */
export function trainBpe(texts: readonly string[], vocabSize: number, split?: string): BpeModel {
  const tokens = byteLevelAlphabet();
  const merges: Array<[string, string]> = [];
  const words = [...wordCounts(texts, split)].map(([w, n]) => ({ symbols: [...w], n }));
  while (tokens.length + ADDED.length < vocabSize) {
    const pairs = new Map<string, number>();
    for (const { symbols, n } of words)
      for (let i = 0; i + 1 < symbols.length; i++) {
        const key = `${symbols[i]} ${symbols[i + 1]}`;
        pairs.set(key, (pairs.get(key) ?? 0) + n);
      }
    let best: string | null = null;
    let bestN = 1;
    for (const [key, n] of pairs) if (n > bestN || (n === bestN && best !== null && key < best)) [best, bestN] = [key, n];
    if (best === null) break; // no pair occurs twice
    const [a, b] = best.split(" ") as [string, string];
    merges.push([a, b]);
    tokens.push(a + b);
    for (const w of words) {
      const out: string[] = [];
      for (let i = 0; i < w.symbols.length; i++)
        if (i + 1 < w.symbols.length && w.symbols[i] === a && w.symbols[i + 1] === b) out.push(a + b), i++;
        else out.push(w.symbols[i]!);
      w.symbols = out;
    }
  }
  return split === undefined ? { tokens, merges } : { tokens, merges, split };
}

export const TOKENIZER_SEED = 77;
/** Vocabulary cap (bytes + merges + added tokens); training stops earlier when no pair occurs twice. */
export const TOKENIZER_VOCAB = 1024;

/** The training text: reference conversations of `n` train tasks, rendered with the tools. */
export function tokenizerCorpus(n = 2000, seed = TOKENIZER_SEED): string[] {
  const template = new ChatTemplate(CHAT_TEMPLATE, { eos_token: EOS_TOKEN, pad_token: PAD_TOKEN });
  return trainTasks(n, seed).map((t) => template.render(referenceConversation(t), { tools: TOOLS }));
}

/** The Calc-X tokenizer: its BPE and its files (same inputs, same bytes). */
export function trainCalcXTokenizer(options: { tasks?: number; seed?: number; vocabSize?: number } = {}): {
  bpe: BpeModel;
  files: ReturnType<typeof tokenizerFiles>;
} {
  const bpe = trainBpe(tokenizerCorpus(options.tasks, options.seed), options.vocabSize ?? TOKENIZER_VOCAB);
  return { bpe, files: tokenizerFiles(bpe) };
}

/** A tokenizer object for files made by `tokenizerFiles` (what `loadPretrained` builds from the folder). */
export function calcXTokenizer(files: ReturnType<typeof tokenizerFiles>) {
  return createHfTokenizer({
    tokenizerJson: JSON.parse(files["tokenizer.json"]),
    tokenizerConfig: JSON.parse(files["tokenizer_config.json"]),
  });
}
