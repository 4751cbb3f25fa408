/**
 * Byte-level tokenizer: ids 0..255 are the bytes of the UTF-8 encoding, then the special ids below.
 * Chat template (special ids cannot be produced by user text, so role markers cannot be injected):
 *
 *   BOS, then for each message: <role id> utf8(content) EOS, then (addGenerationPrompt) ASSISTANT.
 *
 * A generated assistant turn therefore ends at EOS, the usual stop token.
 */
import { ValidationError } from "../types/errors.ts";
import type { Tokenizer } from "./tokenizer-api.ts";

export const BOS_ID = 256;
export const EOS_ID = 257;
export const PAD_ID = 258;
export const ROLE_IDS = { system: 259, user: 260, assistant: 261, tool: 262 } as const;
/** Smallest vocab that covers every id; the presets use TOKENIZER_VOCAB_SIZE (rounded up to a multiple of 8). */
export const MIN_VOCAB_SIZE = 263;
export const TOKENIZER_VOCAB_SIZE = 264;

export type ChatRole = keyof typeof ROLE_IDS;
export interface ChatMessage {
  role: ChatRole;
  content: string;
}

const SPECIAL_NAMES: Record<number, string> = {
  [BOS_ID]: "<|bos|>",
  [EOS_ID]: "<|eos|>",
  [PAD_ID]: "<|pad|>",
  [ROLE_IDS.system]: "<|system|>",
  [ROLE_IDS.user]: "<|user|>",
  [ROLE_IDS.assistant]: "<|assistant|>",
  [ROLE_IDS.tool]: "<|tool|>",
};

const encoder = new TextEncoder();

/** UTF-8 bytes of `text` as ids (no specials added). */
export function encode(text: string): number[] {
  return Array.from(encoder.encode(text));
}

export function isSpecial(id: number): boolean {
  return id >= 256;
}

/**
 * Text of `ids`. Byte runs are decoded as UTF-8 (invalid sequences become U+FFFD); special ids are
 * dropped, or rendered as `<|name|>` with `{ specials: "show" }`.
 */
export function decode(ids: ArrayLike<number>, options: { specials?: "skip" | "show" } = {}): string {
  const show = options.specials === "show";
  let out = "";
  let run: number[] = [];
  const flush = (): void => {
    if (run.length) out += new TextDecoder().decode(new Uint8Array(run));
    run = [];
  };
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i];
    if (id >= 0 && id < 256) {
      run.push(id);
      continue;
    }
    flush();
    const name = SPECIAL_NAMES[id];
    if (name === undefined) throw new ValidationError(`token id ${id} is not in the tokenizer's vocabulary`, ["ids", i]);
    if (show) out += name;
  }
  flush();
  return out;
}

/** Token ids of a conversation under the chat template above. */
export function applyChatTemplate(messages: ChatMessage[], options: { addGenerationPrompt?: boolean } = {}): number[] {
  const ids: number[] = [BOS_ID];
  messages.forEach((m, i) => {
    const role = ROLE_IDS[m.role];
    if (role === undefined) throw new ValidationError(`unknown chat role ${JSON.stringify(m.role)}`, ["messages", i, "role"]);
    ids.push(role);
    for (const b of encoder.encode(m.content)) ids.push(b);
    ids.push(EOS_ID);
  });
  if (options.addGenerationPrompt) ids.push(ROLE_IDS.assistant);
  return ids;
}

/** The byte tokenizer behind the engine-wide {@link Tokenizer} interface. It has no tool format. */
export const byteTokenizer: Tokenizer = {
  vocabSize: MIN_VOCAB_SIZE,
  eosTokenIds: [EOS_ID],
  bosTokenId: BOS_ID,
  padTokenId: PAD_ID,
  toolCallFormat: null,
  encode: (text, options = {}) => (options.addSpecialTokens ? [BOS_ID, ...encode(text)] : encode(text)),
  decode: (ids, options = {}) => decode(ids, { specials: options.skipSpecialTokens === false ? "show" : "skip" }),
  isSpecial,
  applyChatTemplate(messages, options = {}) {
    if (options.tools?.length) throw new ValidationError("the byte tokenizer's chat template cannot render tools", ["tools"]);
    return applyChatTemplate(
      messages.map((m, i) => {
        if (m.tool_calls?.length)
          throw new ValidationError("the byte tokenizer's chat template cannot render tool calls", ["messages", i, "tool_calls"]);
        return { role: m.role as ChatRole, content: m.content ?? "" };
      }),
      options,
    );
  },
};
