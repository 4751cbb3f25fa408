/**
 * A call to Anthropic's Messages API (`POST /v1/messages`) read as the OpenAI chat call it amounts to, so
 * its LLM-call span carries the same attributes as an OpenAI call's (gen-ai.ts) and the adapters read both
 * alike (docs/llm-proxy.md#the-anthropic-messages-api):
 *
 * - `system` becomes a system message; an assistant's `tool_use` blocks become its `tool_calls` (the input
 *   as JSON arguments); a user's `tool_result` blocks become `tool` messages, in place;
 * - the answer's text blocks become the completion's content, its `tool_use` blocks its tool calls, its
 *   `stop_reason` an OpenAI finish reason, its usage `prompt_tokens` (cached input included) and
 *   `completion_tokens`;
 * - tools offered (`name`, `description`, `input_schema`) become functions.
 *
 * Blocks of other kinds (images, thinking, documents) are kept as the JSON of the content, as
 * `contentAsText` keeps an OpenAI message's non-text parts: nothing is dropped.
 */
import type { Attributes } from "../types/span.ts";
import { contentAsText, type JsonObject, openAiCallAttributes } from "./gen-ai.ts";

/** One Messages API call: the request body, the answer (a stream folded by `assembleMessageStream`), or the error. */
export interface AnthropicCall {
  request: JsonObject;
  response?: JsonObject | null;
  error?: { status: number | null; message: string } | null;
}

const isObject = (v: unknown): v is JsonObject => typeof v === "object" && v !== null && !Array.isArray(v);
const blocksOf = (content: unknown): JsonObject[] => (Array.isArray(content) ? content.filter(isObject) : []);
const isToolUse = (b: JsonObject) => b.type === "tool_use";

/** Anthropic's stop reasons in OpenAI's words; others (`pause_turn`, …) are kept as they are. */
const FINISH_REASONS: Record<string, string> = {
  end_turn: "stop",
  stop_sequence: "stop",
  max_tokens: "length",
  tool_use: "tool_calls",
  refusal: "content_filter",
};

function toolCall(block: JsonObject): JsonObject {
  const input = block.input ?? {};
  return {
    id: block.id,
    type: "function",
    function: { name: block.name, arguments: typeof input === "string" ? input : JSON.stringify(input) },
  };
}

/** Blocks other than tool calls as one content (text joined), or null when there are none. */
function restAsContent(blocks: JsonObject[]): string | null {
  return blocks.length === 0 ? null : contentAsText(blocks);
}

/** The request's conversation as OpenAI chat messages (see the module comment). */
function chatMessages(request: JsonObject): JsonObject[] {
  const messages: JsonObject[] = [];
  if (request.system !== undefined && request.system !== null) messages.push({ role: "system", content: contentAsText(request.system) });
  for (const m of blocksOf(request.messages)) {
    if (!Array.isArray(m.content)) {
      messages.push({ role: m.role, content: m.content });
      continue;
    }
    const blocks = blocksOf(m.content);
    if (m.role === "assistant") {
      const calls = blocks.filter(isToolUse).map(toolCall);
      const content = restAsContent(blocks.filter((b) => !isToolUse(b)));
      messages.push({ role: "assistant", content, ...(calls.length > 0 ? { tool_calls: calls } : {}) });
      continue;
    }
    // A user turn: each tool result is a tool message where it stands; the blocks between them one message.
    let run: JsonObject[] = [];
    const flush = () => {
      if (run.length > 0) messages.push({ role: m.role, content: contentAsText(run) });
      run = [];
    };
    for (const b of blocks) {
      if (b.type !== "tool_result") {
        run.push(b);
        continue;
      }
      flush();
      messages.push({ role: "tool", tool_call_id: b.tool_use_id, content: contentAsText(b.content ?? "") });
    }
    flush();
  }
  return messages;
}

/** A Messages request as the OpenAI chat request it amounts to (model, sampling, messages, tools). */
export function messagesRequestAsChat(request: JsonObject): JsonObject {
  const chat: JsonObject = {
    model: request.model,
    temperature: request.temperature,
    top_p: request.top_p,
    max_tokens: request.max_tokens,
    stream: request.stream,
    messages: chatMessages(request),
  };
  if (request.stop_sequences !== undefined) chat.stop = request.stop_sequences;
  if (Array.isArray(request.tools))
    chat.tools = blocksOf(request.tools).map((t) => ({
      type: "function",
      function: { name: t.name, description: t.description, parameters: t.input_schema },
    }));
  return chat;
}

const count = (v: unknown): number => (typeof v === "number" ? v : 0);

/** A Messages answer as the OpenAI chat completion it amounts to (one choice). */
export function messageAsChatCompletion(message: JsonObject): JsonObject {
  const blocks = blocksOf(message.content);
  const calls = blocks.filter(isToolUse).map(toolCall);
  const content = restAsContent(blocks.filter((b) => !isToolUse(b))) ?? (calls.length > 0 ? null : "");
  const stop = typeof message.stop_reason === "string" ? message.stop_reason : null;
  const completion: JsonObject = {
    id: message.id,
    object: "chat.completion",
    model: message.model,
    choices: [
      {
        index: 0,
        message: { role: "assistant", content, ...(calls.length > 0 ? { tool_calls: calls } : {}) },
        finish_reason: stop === null ? null : (FINISH_REASONS[stop] ?? stop),
      },
    ],
  };
  if (isObject(message.usage) && typeof message.usage.input_tokens === "number") {
    const u = message.usage;
    // Anthropic counts cached input apart from `input_tokens`; the prompt is all of it.
    const prompt = count(u.input_tokens) + count(u.cache_creation_input_tokens) + count(u.cache_read_input_tokens);
    const output = count(u.output_tokens);
    completion.usage = { prompt_tokens: prompt, completion_tokens: output, total_tokens: prompt + output };
  }
  return completion;
}

/** The LLM-call span attributes of one Messages call: those of the OpenAI call it amounts to. */
export function anthropicCallAttributes(call: AnthropicCall): Attributes {
  return openAiCallAttributes({
    request: messagesRequestAsChat(call.request),
    response: call.response ? messageAsChatCompletion(call.response) : null,
    error: call.error,
  });
}

interface OpenBlock {
  block: JsonObject;
  /** A tool call's input as it streams (`input_json_delta` pieces). */
  json: string[];
}

/** A streamed tool call's input: its pieces parsed, or the text itself when they do not parse. */
function streamedInput(o: OpenBlock): unknown {
  if (o.json.length === 0) return o.block.input ?? {};
  const text = o.json.join("");
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * The events of a streamed Messages answer (`message_start`, `content_block_start|delta|stop`,
 * `message_delta`, `message_stop`) folded into the message the same call would have returned unstreamed:
 * text and thinking joined, tool inputs parsed from their JSON pieces, the stop reason and usage from
 * `message_delta`. An `error` event's error object is returned beside it.
 */
export function assembleMessageStream(events: JsonObject[]): { message: JsonObject | null; error: JsonObject | null } {
  let message: JsonObject | null = null;
  let error: JsonObject | null = null;
  const blocks = new Map<number, OpenBlock>();
  for (const e of events) {
    const index = typeof e.index === "number" ? e.index : -1;
    const open = blocks.get(index);
    if (e.type === "message_start" && isObject(e.message)) message = { ...e.message };
    else if (e.type === "content_block_start" && isObject(e.content_block)) blocks.set(index, { block: { ...e.content_block }, json: [] });
    else if (e.type === "content_block_delta" && open && isObject(e.delta)) {
      const d = e.delta;
      if (d.type === "text_delta") open.block.text = `${open.block.text ?? ""}${d.text ?? ""}`;
      else if (d.type === "input_json_delta" && typeof d.partial_json === "string") open.json.push(d.partial_json);
      else if (d.type === "thinking_delta") open.block.thinking = `${open.block.thinking ?? ""}${d.thinking ?? ""}`;
      else if (d.type === "signature_delta") open.block.signature = d.signature;
      else if (d.type === "citations_delta") open.block.citations = [...blocksOf(open.block.citations), d.citation];
    } else if (e.type === "message_delta" && message !== null) {
      if (isObject(e.delta)) Object.assign(message, e.delta);
      if (isObject(e.usage)) message.usage = { ...(isObject(message.usage) ? message.usage : {}), ...e.usage };
    } else if (e.type === "error" && isObject(e.error)) error = e.error;
  }
  if (message !== null) {
    message.content = [...blocks.entries()]
      .sort(([a], [b]) => a - b)
      .map(([, o]) => (o.block.type === "tool_use" ? { ...o.block, input: streamedInput(o) } : o.block));
  }
  return { message, error };
}
