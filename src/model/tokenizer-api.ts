/**
 * The one tokenizer interface the engine, the generation code and the policy server use. Two
 * implementations: the byte tokenizer of our own presets (`tokenizer.ts`, `byteTokenizer`) and a
 * Hugging Face `tokenizer.json` + chat template (`hf/tokenizer.ts`). Nothing downstream cares which.
 */

/** A function the model may call, in the OpenAI `tools` shape (what chat templates receive). */
export interface ToolDefinition {
  type: "function";
  function: { name: string; description?: string; parameters?: Record<string, unknown> };
}

/** One tool call of an assistant message, in the OpenAI shape. */
export interface ToolCall {
  id: string;
  type: "function";
  function: { name: string /** JSON text of the arguments. */; arguments: string };
}

/** A chat message as chat templates see it (the OpenAI message shape, content already flattened to text). */
export interface TemplateMessage {
  role: string;
  content: string | null;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
  name?: string;
}

export interface ChatTemplateOptions {
  /** End with the tokens that open an assistant turn [false]. */
  addGenerationPrompt?: boolean;
  /** Tools offered to the model, rendered by the template [none]. */
  tools?: readonly ToolDefinition[];
}

/** How a model writes tool calls in its text (detected from its chat template). */
export type ToolCallFormat = "hermes" | "llama3-json" | null;

export interface Tokenizer {
  /** Every id this tokenizer produces is below this (the model's vocab_size may be larger). */
  readonly vocabSize: number;
  /** Ids that end an assistant turn: generation stops on them unless told otherwise. */
  readonly eosTokenIds: readonly number[];
  readonly bosTokenId: number | null;
  readonly padTokenId: number | null;
  /** How this model's chat template expects tool calls to be written, null when it has none. */
  readonly toolCallFormat: ToolCallFormat;
  /** Ids of `text`; `addSpecialTokens` adds what the tokenizer's post-processor adds (e.g. BOS) [false]. */
  encode(text: string, options?: { addSpecialTokens?: boolean }): number[];
  /** Text of `ids`; special tokens are skipped unless `skipSpecialTokens: false` [true]. */
  decode(ids: ArrayLike<number>, options?: { skipSpecialTokens?: boolean }): string;
  /** True for control tokens (BOS, EOS, role markers, ...). */
  isSpecial(id: number): boolean;
  /** Token ids of a conversation under the model's chat template. */
  applyChatTemplate(messages: readonly TemplateMessage[], options?: ChatTemplateOptions): number[];
}
