/**
 * Supervised fine-tuning rows from chat records (docs/training.md#sft-from-chat-records): the
 * `{messages, tools?}` records `TraceToMessages` makes (OpenAI chat format), rendered with the
 * tokenizer's chat template into a `TokenBatch` whose response mask covers exactly the assistant turns.
 *
 * Where an assistant turn k sits is found by rendering prefixes of the conversation: the turn starts
 * where `messages[0..k)` rendered with the generation prompt ends (what the model is given before it
 * writes the turn; one token earlier when the turn's first characters merged with that prompt's last
 * token), and ends where `messages[0..k]` rendered ends, cut back to just after the turn's
 * last end-of-turn token (a template may add text after it, such as Qwen's newline, which generation
 * never produces). A template that renders earlier turns differently once later ones follow (Qwen3
 * drops the empty think block) is handled by ending such a turn at its first end-of-turn token in the
 * whole conversation instead. How this differs from transformers/TRL: docs/departures.md#37.
 */
import { batchFromTokens } from "../model/batch.ts";
import type { TemplateMessage, Tokenizer, ToolCall, ToolDefinition } from "../model/tokenizer-api.ts";
import type { TokenBatch } from "../model/train-types.ts";
import { ValidationError } from "../types/errors.ts";

/** Which assistant turns carry the loss: every one, or only the conversation's last. */
export type SftTrainOn = "assistant" | "last-assistant";

export interface SftBatchOptions {
  /** Most tokens of one row (prompt and response); longer records are cut or dropped (below). */
  maxLength: number;
  /** [assistant] */
  trainOn?: SftTrainOn;
}

/** One tokenized record: its ids and a 0/1 mask of the trained (assistant) tokens. */
export interface SftRow {
  /** Index of the record in the input. */
  record: number;
  ids: number[];
  mask: Uint8Array;
  /** Index of the first trained token in `ids` (>= 1: a trained token is predicted from the one before). */
  first: number;
  /** Tokens cut from the left of the prompt to fit `maxLength` (0: none). */
  cut: number;
}

export interface SftRows {
  rows: SftRow[];
  /** Records whose prompt was cut from the left to fit `maxLength` (their trained tokens are all kept). */
  truncated: number[];
  /** Records left out: their trained tokens alone, plus one token of context, exceed `maxLength`. */
  dropped: number[];
}

export interface SftBatch extends SftRows {
  /** The padded batch of `rows`; null when every record was dropped. */
  batch: TokenBatch | null;
  /** Trained (masked) tokens in the batch. */
  tokens: number;
}

const ROLES = new Set(["system", "developer", "user", "assistant", "tool", "function"]);

type Path = (string | number)[];

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function optionalString(v: unknown, path: Path, what: string): string | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== "string") throw new ValidationError(`${what} must be a string`, path);
  return v;
}

function parseToolCall(raw: unknown, path: Path): ToolCall {
  if (!isObject(raw) || !isObject(raw.function)) throw new ValidationError("a tool call needs a `function` object", path);
  if (raw.type !== undefined && raw.type !== "function")
    throw new ValidationError(`tool call type must be "function", got ${JSON.stringify(raw.type)}`, [...path, "type"]);
  const fn = raw.function;
  if (typeof fn.name !== "string") throw new ValidationError("a tool call needs a string function name", [...path, "function", "name"]);
  // OpenAI sends the arguments as JSON text; an already parsed object is accepted and written back as JSON
  const args = fn.arguments === undefined ? "{}" : isObject(fn.arguments) ? JSON.stringify(fn.arguments) : fn.arguments;
  if (typeof args !== "string")
    throw new ValidationError("tool call arguments must be JSON text or an object", [...path, "function", "arguments"]);
  const id = optionalString(raw.id, [...path, "id"], "a tool call id") ?? "";
  return { id, type: "function", function: { name: fn.name, arguments: args } };
}

function parseMessage(raw: unknown, path: Path): TemplateMessage {
  if (!isObject(raw)) throw new ValidationError("a message must be an object", path);
  const role = raw.role;
  if (typeof role !== "string" || !ROLES.has(role))
    throw new ValidationError(`unknown role ${JSON.stringify(role)} (system, developer, user, assistant, tool or function)`, [
      ...path,
      "role",
    ]);
  let toolCalls: ToolCall[] | undefined;
  if (raw.tool_calls !== undefined && raw.tool_calls !== null) {
    if (role !== "assistant") throw new ValidationError("only assistant messages carry tool_calls", [...path, "tool_calls"]);
    if (!Array.isArray(raw.tool_calls)) throw new ValidationError("tool_calls must be a list", [...path, "tool_calls"]);
    toolCalls = raw.tool_calls.map((c, k) => parseToolCall(c, [...path, "tool_calls", k]));
  }
  const content = raw.content;
  // null content is OpenAI's shape of an assistant turn that only calls tools
  if (!(typeof content === "string" || (content === null && toolCalls?.length)))
    throw new ValidationError(
      content === null || content === undefined
        ? "content is missing (only an assistant message with tool_calls may have null content)"
        : `content must be a string, got ${Array.isArray(content) ? "a list" : typeof content}`,
      [...path, "content"],
    );
  const message: TemplateMessage = { role, content: content as string | null };
  if (toolCalls?.length) message.tool_calls = toolCalls;
  const callId = optionalString(raw.tool_call_id, [...path, "tool_call_id"], "tool_call_id");
  if (callId !== undefined) message.tool_call_id = callId;
  const name = optionalString(raw.name, [...path, "name"], "name");
  if (name !== undefined) message.name = name;
  return message;
}

function parseTool(raw: unknown, path: Path): ToolDefinition {
  if (!isObject(raw) || raw.type !== "function" || !isObject(raw.function) || typeof raw.function.name !== "string")
    throw new ValidationError('a tool must be {type: "function", function: {name, ...}}', path);
  return raw as unknown as ToolDefinition;
}

/** The record's messages and tools in template form; throws ValidationError naming `records.<i>.<field>`. */
export function parseChatRecord(raw: unknown, index: number): { messages: TemplateMessage[]; tools: ToolDefinition[] } {
  const path: Path = ["records", index];
  if (!isObject(raw) || !Array.isArray(raw.messages))
    throw new ValidationError(`record ${index} needs a list of messages`, [...path, "messages"]);
  const messages = raw.messages.map((m, j) => parseMessage(m, [...path, "messages", j]));
  if (!messages.some((m) => m.role === "assistant"))
    throw new ValidationError(`record ${index} has no assistant turn to train on`, [...path, "messages"]);
  let tools: ToolDefinition[] = [];
  if (raw.tools !== undefined && raw.tools !== null) {
    if (!Array.isArray(raw.tools)) throw new ValidationError("tools must be a list", [...path, "tools"]);
    tools = raw.tools.map((t, k) => parseTool(t, [...path, "tools", k]));
  }
  return { messages, tools };
}

/** Length of the longest common prefix of `a` and `b`. */
function commonPrefix(a: readonly number[], b: readonly number[]): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

/** The template's refusal of a record, re-thrown with the record's index in front of its path. */
function inRecord<T>(index: number, fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    if (!(e instanceof ValidationError)) throw e;
    const issues = e.issues.length
      ? e.issues.map((i) => ({ ...i, path: ["records", index, ...i.path] }))
      : [{ path: ["records", index], message: e.message }];
    throw new ValidationError(`record ${index}: ${e.message}`, issues);
  }
}

/**
 * A record's ids under the chat template and the mask of its trained tokens (before any cut), up to
 * the end of its last trained turn (messages after the last assistant turn are not rendered).
 */
export function tokenizeChatRecord(
  raw: unknown,
  index: number,
  tokenizer: Tokenizer,
  trainOn: SftTrainOn = "assistant",
): { ids: number[]; mask: Uint8Array } {
  if (trainOn !== "assistant" && trainOn !== "last-assistant")
    throw new ValidationError(`trainOn must be "assistant" or "last-assistant", got ${JSON.stringify(trainOn)}`, ["trainOn"]);
  const { messages, tools } = parseChatRecord(raw, index);
  const last = messages.map((m) => m.role).lastIndexOf("assistant");
  const conversation = messages.slice(0, last + 1);
  const render = (upto: number, generationPrompt: boolean): number[] =>
    inRecord(index, () =>
      tokenizer.applyChatTemplate(conversation.slice(0, upto), {
        addGenerationPrompt: generationPrompt,
        ...(tools.length ? { tools } : {}),
      }),
    );
  const full = render(last + 1, false);
  const eos = new Set(tokenizer.eosTokenIds);
  const mask = new Uint8Array(full.length);
  let end = 0;
  for (let k = 0; k <= last; k++) {
    if (conversation[k].role !== "assistant" || (trainOn === "last-assistant" && k !== last)) continue;
    const before = render(k, true);
    // The turn starts where the generation prompt ends. When the turn's first characters merge with
    // the header's last token (content opening with a newline), that merged token is the turn's first.
    const shared = commonPrefix(before, full);
    const start = shared === before.length ? shared : shared === before.length - 1 && shared > 0 ? shared : -1;
    if (start < 0)
      throw new ValidationError(
        `record ${index}: the chat template renders the conversation before assistant turn ${k} differently from the whole conversation (at token ${shared}), so the turn cannot be located`,
        ["records", index, "messages", k],
      );
    if (start === 0)
      throw new ValidationError(`record ${index}: the chat template renders nothing before assistant turn ${k} to predict it from`, [
        "records",
        index,
        "messages",
        k,
      ]);
    const through = k === last ? full : render(k + 1, false);
    let stop = -1;
    if (through.length > start && commonPrefix(through, full) === through.length) {
      stop = through.length;
      for (let t = through.length - 1; t >= start; t--)
        if (eos.has(through[t])) {
          stop = t + 1;
          break;
        }
    } else {
      for (let t = start; t < full.length && stop < 0; t++) if (eos.has(full[t])) stop = t + 1;
    }
    if (stop <= start)
      throw new ValidationError(`record ${index}: assistant turn ${k} renders to no tokens the template ends`, [
        "records",
        index,
        "messages",
        k,
      ]);
    mask.fill(1, start, stop);
    end = stop;
  }
  return { ids: full.slice(0, end), mask: mask.slice(0, end) };
}

/**
 * Tokenizes every record. A record longer than `maxLength` loses the start of its prompt (the oldest
 * context: the turn being answered matters most) when its trained tokens, plus one token they are
 * predicted from, still fit; otherwise it is dropped, since a partial answer would teach the model to
 * stop mid-answer (docs/departures.md#37). Bad records throw (nothing is dropped silently).
 */
export function sftRowsFromChats(records: ArrayLike<unknown>, tokenizer: Tokenizer, options: SftBatchOptions): SftRows {
  const { maxLength } = options;
  if (!(Number.isInteger(maxLength) && maxLength >= 2))
    throw new ValidationError(`maxLength must be an integer >= 2, got ${maxLength}`, ["maxLength"]);
  const out: SftRows = { rows: [], truncated: [], dropped: [] };
  for (let i = 0; i < records.length; i++) {
    const { ids, mask } = tokenizeChatRecord(records[i], i, tokenizer, options.trainOn ?? "assistant");
    const first = mask.indexOf(1);
    if (ids.length - first + 1 > maxLength) {
      out.dropped.push(i);
      continue;
    }
    const cut = Math.max(0, ids.length - maxLength);
    if (cut > 0) out.truncated.push(i);
    out.rows.push({ record: i, ids: ids.slice(cut), mask: mask.slice(cut), first: first - cut, cut });
  }
  return out;
}

/**
 * The padded batch of tokenized rows. Every trained token lies in the response part; the split is
 * chosen so a row is never wider than the longest row: R = the longest trained span (first trained
 * token to the end), and a shorter row's response part starts earlier, with mask 0 on its context.
 */
export function sftBatchFromRows(rows: readonly SftRow[], padId: number): TokenBatch {
  if (rows.length === 0) throw new ValidationError("an SFT batch needs at least one row", ["rows"]);
  const R = Math.max(...rows.map((r) => r.ids.length - r.first));
  const splits = rows.map((r) => Math.max(1, r.ids.length - R));
  const P = Math.max(...splits);
  const batch = batchFromTokens(
    rows.map((r, i) => ({ prompt: r.ids.slice(0, splits[i]), response: r.ids.slice(splits[i]) })),
    { P, R, padId },
  );
  const responseMask = new Int32Array(rows.length * R);
  rows.forEach((r, i) => {
    for (let t = splits[i]; t < r.ids.length; t++) responseMask[i * R + t - splits[i]] = r.mask[t];
  });
  return { ...batch, responseMask };
}

/** The pad id of a batch: the tokenizer's, else its first end-of-turn id (padding is masked out either way). */
export function sftPadId(tokenizer: Tokenizer): number {
  return tokenizer.padTokenId ?? tokenizer.eosTokenIds[0] ?? 0;
}

/** Chat records to one padded SFT batch, with the records that were cut or dropped. */
export function sftBatchFromChats(records: ArrayLike<unknown>, tokenizer: Tokenizer, options: SftBatchOptions): SftBatch {
  const rows = sftRowsFromChats(records, tokenizer, options);
  const tokens = rows.rows.reduce((s, r) => s + r.mask.reduce((a, b) => a + b, 0), 0);
  return { ...rows, batch: rows.rows.length ? sftBatchFromRows(rows.rows, sftPadId(tokenizer)) : null, tokens };
}
