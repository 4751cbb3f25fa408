/**
 * Our byte tokenizer written as Hugging Face tokenizer files, so exported checkpoints load in HF
 * tools: a byte-level BPE without merges whose vocabulary maps each byte's GPT-2 unicode stand-in to
 * the byte's value (ids 0..255), our control tokens as added special tokens (256..262), and a Jinja
 * chat template producing our template's ids. One difference: HF tokenizers recognise `<|user|>` and
 * the other control strings inside user text, ours never does (docs/departures.md#34).
 */
import { BOS_ID, EOS_ID, PAD_ID, ROLE_IDS } from "../tokenizer.ts";

/** GPT-2's byte → printable unicode character table (the ByteLevel pre-tokenizer's alphabet). */
export function byteLevelAlphabet(): string[] {
  const keep: number[] = [];
  for (let b = 33; b <= 126; b++) keep.push(b);
  for (let b = 161; b <= 172; b++) keep.push(b);
  for (let b = 174; b <= 255; b++) keep.push(b);
  const out: string[] = new Array(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) out[b] = keep.includes(b) ? String.fromCharCode(b) : String.fromCharCode(256 + extra++);
  return out;
}

const SPECIALS: Array<[number, string]> = [
  [BOS_ID, "<|bos|>"],
  [EOS_ID, "<|eos|>"],
  [PAD_ID, "<|pad|>"],
  [ROLE_IDS.system, "<|system|>"],
  [ROLE_IDS.user, "<|user|>"],
  [ROLE_IDS.assistant, "<|assistant|>"],
  [ROLE_IDS.tool, "<|tool|>"],
];

const CHAT_TEMPLATE =
  "{{ bos_token }}{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] + eos_token }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}";

/** `tokenizer.json` and `tokenizer_config.json` (as JSON text) of the byte tokenizer. */
export function byteTokenizerFiles(): { "tokenizer.json": string; "tokenizer_config.json": string } {
  const vocab: Record<string, number> = {};
  byteLevelAlphabet().forEach((ch, b) => {
    vocab[ch] = b;
  });
  const tokenizer = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: SPECIALS.map(([id, content]) => ({
      id,
      content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: true,
    })),
    normalizer: null,
    pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
    post_processor: {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "<|bos|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
      pair: [{ SpecialToken: { id: "<|bos|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 0 } }],
      special_tokens: { "<|bos|>": { id: "<|bos|>", ids: [BOS_ID], tokens: ["<|bos|>"] } },
    },
    decoder: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges: [],
    },
  };
  const config = {
    tokenizer_class: "PreTrainedTokenizerFast",
    bos_token: "<|bos|>",
    eos_token: "<|eos|>",
    pad_token: "<|pad|>",
    add_bos_token: false,
    clean_up_tokenization_spaces: false,
    model_max_length: 1_000_000,
    chat_template: CHAT_TEMPLATE,
    added_tokens_decoder: Object.fromEntries(
      SPECIALS.map(([id, content]) => [
        String(id),
        { content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
      ]),
    ),
  };
  return { "tokenizer.json": JSON.stringify(tokenizer), "tokenizer_config.json": JSON.stringify(config, null, 2) };
}
