/**
 * A Hugging Face tokenizer (`tokenizer.json` + `tokenizer_config.json`) behind our {@link Tokenizer}
 * interface: encoding and decoding through `@huggingface/tokenizers` (HF's own pure-JS tokenizers:
 * byte-level BPE, WordPiece, Unigram, added and special tokens), chat templates through
 * `@huggingface/jinja` (chat-template.ts). docs/tokenizers.md says why these two and their limits.
 */
import { Tokenizer as HfTokenizerImpl } from "@huggingface/tokenizers";
import { ValidationError } from "../../types/errors.ts";
import type { ChatTemplateOptions, TemplateMessage, Tokenizer, ToolCallFormat } from "../tokenizer-api.ts";
import { ChatTemplate, detectToolCallFormat } from "./chat-template.ts";
import { HfFormatError } from "./errors.ts";
import { readJson, type ModelFiles } from "./source.ts";
import { compatTokenizerJson } from "./tokenizer-compat.ts";

export interface HfTokenizerFiles {
  /** Parsed tokenizer.json. */
  tokenizerJson: unknown;
  /** Parsed tokenizer_config.json (chat template, special-token strings); null when absent. */
  tokenizerConfig: unknown | null;
  /** Ids that end an assistant turn (generation_config.json's); default: the config's eos_token. */
  eosTokenIds?: readonly number[];
  /** More chat-template variables for every conversation, e.g. `{ enable_thinking: false }` for Qwen3 [none]. */
  templateVariables?: Record<string, unknown>;
}

/** A special-token field of tokenizer_config.json: a string or `{ content }`. */
function tokenString(v: unknown): string | null {
  if (typeof v === "string") return v;
  if (v && typeof v === "object" && typeof (v as { content?: unknown }).content === "string") return (v as { content: string }).content;
  return null;
}

function largestId(json: Record<string, unknown>): number {
  let max = -1;
  const model = json.model as { vocab?: unknown } | undefined;
  const vocab = model?.vocab;
  if (Array.isArray(vocab)) max = vocab.length - 1;
  else if (vocab && typeof vocab === "object") for (const id of Object.values(vocab as Record<string, number>)) if (id > max) max = id;
  for (const t of (json.added_tokens as Array<{ id: number }> | undefined) ?? []) if (t.id > max) max = t.id;
  return max;
}

class HfTokenizer implements Tokenizer {
  readonly vocabSize: number;
  readonly eosTokenIds: readonly number[];
  readonly bosTokenId: number | null;
  readonly padTokenId: number | null;
  readonly toolCallFormat: ToolCallFormat;
  private readonly special: Set<number>;
  private readonly template: ChatTemplate;

  constructor(
    private readonly impl: HfTokenizerImpl,
    json: Record<string, unknown>,
    config: Record<string, unknown>,
    eos: readonly number[] | undefined,
    templateVariables: Record<string, unknown> | undefined,
  ) {
    this.vocabSize = largestId(json) + 1;
    this.special = new Set([...impl.get_added_tokens_decoder()].filter(([, t]) => t.special).map(([id]) => id));
    const idOf = (field: string): number | null => {
      const s = tokenString(config[field]);
      return s === null ? null : (impl.token_to_id(s) ?? null);
    };
    const configEos = idOf("eos_token");
    this.eosTokenIds = eos?.length ? [...eos] : configEos === null ? [] : [configEos];
    this.bosTokenId = idOf("bos_token");
    this.padTokenId = idOf("pad_token");
    const specials: Record<string, string | null> = {};
    for (const f of ["bos_token", "eos_token", "pad_token", "unk_token"]) specials[f] = tokenString(config[f]);
    this.template = new ChatTemplate(config.chat_template, specials, templateVariables);
    this.toolCallFormat = detectToolCallFormat(this.template.toolTemplate);
  }

  encode(text: string, options: { addSpecialTokens?: boolean } = {}): number[] {
    return this.impl.encode(text, { add_special_tokens: options.addSpecialTokens === true }).ids;
  }

  /**
   * Ids at or above `vocabSize` (a model's padded vocabulary) decode to nothing, as in Hugging Face's
   * tokenizers; a negative or fractional id is a caller's bug and refused.
   */
  decode(ids: ArrayLike<number>, options: { skipSpecialTokens?: boolean } = {}): string {
    const list = Array.from(ids);
    list.forEach((id, i) => {
      if (!Number.isInteger(id) || id < 0) throw new ValidationError(`token id ${id} is not a non-negative integer`, ["ids", i]);
    });
    // @huggingface/tokenizers refuses an empty list; Rust's decodes it to "".
    if (list.length === 0) return "";
    return this.impl.decode(list, { skip_special_tokens: options.skipSpecialTokens !== false });
  }

  isSpecial(id: number): boolean {
    return this.special.has(id);
  }

  /** The rendered template text (special tokens as their strings). */
  renderChat(messages: readonly TemplateMessage[], options: ChatTemplateOptions = {}): string {
    return this.template.render(messages, options);
  }

  applyChatTemplate(messages: readonly TemplateMessage[], options: ChatTemplateOptions = {}): number[] {
    // The rendered text already holds the template's special tokens: encode it without adding more.
    return this.encode(this.renderChat(messages, options));
  }
}

/** A tokenizer from parsed HF tokenizer files. */
export function createHfTokenizer(
  files: HfTokenizerFiles,
): Tokenizer & { renderChat(messages: readonly TemplateMessage[], options?: ChatTemplateOptions): string } {
  const json = files.tokenizerJson;
  if (typeof json !== "object" || json === null || typeof (json as { model?: unknown }).model !== "object")
    throw new HfFormatError("tokenizer.json", "model", "missing: not a Hugging Face tokenizer.json");
  const config = (files.tokenizerConfig ?? {}) as Record<string, unknown>;
  let impl: HfTokenizerImpl;
  try {
    impl = new HfTokenizerImpl(compatTokenizerJson(json as Record<string, unknown>), config);
  } catch (e) {
    throw new HfFormatError("tokenizer.json", null, `cannot be loaded: ${(e as Error).message}`);
  }
  return new HfTokenizer(impl, json as Record<string, unknown>, config, files.eosTokenIds, files.templateVariables);
}

/** The tokenizer of a model folder (tokenizer.json, and tokenizer_config.json when present). */
export async function loadHfTokenizer(files: ModelFiles, eosTokenIds?: readonly number[]): Promise<Tokenizer> {
  const tokenizerJson = await readJson(files, "tokenizer.json");
  const tokenizerConfig = (await files.has("tokenizer_config.json")) ? await readJson(files, "tokenizer_config.json") : null;
  return createHfTokenizer({ tokenizerJson, tokenizerConfig, eosTokenIds });
}
