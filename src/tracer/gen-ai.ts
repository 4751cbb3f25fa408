/**
 * The attributes of an LLM-call span, from an OpenAI-compatible call as it went over the wire: the request
 * body sent and the response body received. One shape for every recorder (the LLM proxy, the traced `openai`
 * client), and the shape the adapters read (docs/tracing.md#llm-call-attributes):
 *
 * - `gen_ai.prompt.{i}.role|content|tool_call_id|name`, an assistant message's calls as
 *   `gen_ai.prompt.{i}.tool_calls.{j}.id|type|name|arguments`;
 * - `gen_ai.completion.{i}.role|content|finish_reason`, the answer's calls as `gen_ai.completion.{i}.tool_calls.{j}.*`;
 * - `gen_ai.request.model|temperature|top_p|max_tokens|n`, tools offered as `gen_ai.request.functions.{k}.name|description|parameters`;
 * - `gen_ai.response.id|model`, `gen_ai.usage.prompt_tokens|completion_tokens|total_tokens`, `gen_ai.operation.name`;
 * - `prompt_token_ids` / `response_token_ids` (integer arrays) when the backend returned vLLM's token ids;
 * - `error.type` (the HTTP status, or `connection_error`) when the call failed.
 */
import type { Attributes } from "../types/span.ts";

export type JsonObject = Record<string, unknown>;

/** One OpenAI-compatible call: the request body and the response body (a stream assembled by `assembleStream`), or the error. */
export interface OpenAiCall {
  request: JsonObject;
  response?: JsonObject | null;
  error?: { status: number | null; message: string } | null;
}

const isObject = (v: unknown): v is JsonObject => typeof v === "object" && v !== null && !Array.isArray(v);
const isTokenIds = (v: unknown): v is number[] => Array.isArray(v) && v.length > 0 && v.every((x) => Number.isInteger(x));

/** A message's content as text: text parts joined; any other part kept as its JSON so nothing is lost. */
export function contentAsText(content: unknown): string | null {
  if (content === null || content === undefined) return null;
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return JSON.stringify(content);
  const parts = content as unknown[];
  if (parts.every((p) => isObject(p) && p.type === "text" && typeof p.text === "string"))
    return parts.map((p) => (p as JsonObject).text).join("");
  return JSON.stringify(content);
}

function setIfDefined(out: Attributes, key: string, value: unknown): void {
  if (value === undefined || value === null) return;
  if (typeof value === "string" || typeof value === "number" || typeof value === "boolean") out[key] = value;
  else out[key] = JSON.stringify(value);
}

function putToolCalls(out: Attributes, prefix: string, calls: unknown): void {
  if (!Array.isArray(calls)) return;
  calls.forEach((call, j) => {
    if (!isObject(call)) return;
    const fn = isObject(call.function) ? call.function : {};
    setIfDefined(out, `${prefix}.tool_calls.${j}.id`, call.id);
    setIfDefined(out, `${prefix}.tool_calls.${j}.type`, call.type ?? "function");
    setIfDefined(out, `${prefix}.tool_calls.${j}.name`, fn.name);
    setIfDefined(out, `${prefix}.tool_calls.${j}.arguments`, fn.arguments);
  });
}

function putPrompt(out: Attributes, request: JsonObject): void {
  if (Array.isArray(request.messages)) {
    request.messages.forEach((m, i) => {
      if (!isObject(m)) return;
      const p = `gen_ai.prompt.${i}`;
      setIfDefined(out, `${p}.role`, m.role);
      setIfDefined(out, `${p}.content`, contentAsText(m.content));
      setIfDefined(out, `${p}.tool_call_id`, m.tool_call_id);
      setIfDefined(out, `${p}.name`, m.name);
      putToolCalls(out, p, m.tool_calls);
    });
    return;
  }
  // A text completion: its prompt is one user message (token-id prompts are recorded as token ids).
  const prompt = request.prompt;
  const text =
    typeof prompt === "string" ? prompt : Array.isArray(prompt) && prompt.every((x) => typeof x === "string") ? prompt.join("") : null;
  if (text !== null) {
    out["gen_ai.prompt.0.role"] = "user";
    out["gen_ai.prompt.0.content"] = text;
  }
}

function putRequest(out: Attributes, request: JsonObject): void {
  setIfDefined(out, "gen_ai.request.model", request.model);
  setIfDefined(out, "gen_ai.request.temperature", request.temperature);
  setIfDefined(out, "gen_ai.request.top_p", request.top_p);
  setIfDefined(out, "gen_ai.request.max_tokens", request.max_tokens ?? request.max_completion_tokens);
  setIfDefined(out, "gen_ai.request.n", request.n);
  setIfDefined(out, "gen_ai.request.stream", request.stream);
  const tools = Array.isArray(request.tools)
    ? request.tools.map((t) => (isObject(t) && isObject(t.function) ? t.function : null))
    : Array.isArray(request.functions)
      ? request.functions
      : [];
  tools.forEach((fn, k) => {
    if (!isObject(fn)) return;
    setIfDefined(out, `gen_ai.request.functions.${k}.name`, fn.name);
    setIfDefined(out, `gen_ai.request.functions.${k}.description`, fn.description);
    setIfDefined(out, `gen_ai.request.functions.${k}.parameters`, fn.parameters);
  });
}

function putResponse(out: Attributes, response: JsonObject, request: JsonObject): void {
  setIfDefined(out, "gen_ai.response.id", response.id);
  setIfDefined(out, "gen_ai.response.model", response.model);
  const choices = Array.isArray(response.choices) ? response.choices.filter(isObject) : [];
  choices.forEach((choice, i) => {
    const p = `gen_ai.completion.${i}`;
    const message = isObject(choice.message) ? choice.message : null;
    out[`${p}.role`] = typeof message?.role === "string" ? message.role : "assistant";
    setIfDefined(out, `${p}.content`, message ? contentAsText(message.content) : choice.text);
    setIfDefined(out, `${p}.finish_reason`, choice.finish_reason);
    if (message) putToolCalls(out, p, message.tool_calls);
  });
  const usage = isObject(response.usage) ? response.usage : {};
  setIfDefined(out, "gen_ai.usage.prompt_tokens", usage.prompt_tokens);
  setIfDefined(out, "gen_ai.usage.completion_tokens", usage.completion_tokens);
  setIfDefined(out, "gen_ai.usage.total_tokens", usage.total_tokens);
  // vLLM / SGLang / our policy server: prompt ids at the top (chat) or per choice (completions), answer ids per choice.
  const first = choices[0];
  const promptIds = [response.prompt_token_ids, first?.prompt_token_ids, request.prompt].find(isTokenIds);
  if (promptIds) out.prompt_token_ids = promptIds;
  const fields = isObject(first?.provider_specific_fields) ? first.provider_specific_fields : {};
  const responseIds = [first?.token_ids, fields.token_ids].find(isTokenIds);
  if (responseIds) out.response_token_ids = responseIds;
}

/** The LLM-call span attributes of one call (see the module comment for the keys). */
export function openAiCallAttributes(call: OpenAiCall): Attributes {
  const out: Attributes = {};
  const { request } = call;
  out["gen_ai.operation.name"] = Array.isArray(request.messages) ? "chat" : "text_completion";
  putRequest(out, request);
  putPrompt(out, request);
  if (call.response) putResponse(out, call.response, request);
  if (call.error) out["error.type"] = call.error.status === null ? "connection_error" : String(call.error.status);
  return out;
}

interface ChoiceParts {
  role: string | null;
  text: string[];
  finishReason: unknown;
  toolCalls: Map<number, { id?: unknown; type?: unknown; name: string[]; arguments: string[] }>;
  tokenIds: number[];
  promptTokenIds: number[] | null;
  isChat: boolean;
}

/**
 * The chunks of an SSE answer (`chat.completion.chunk` or streamed `text_completion` objects) folded into the
 * body the same call would have returned unstreamed: text joined, tool calls merged by index (arguments
 * concatenated), the last finish reason, usage, and vLLM's token ids concatenated.
 */
export function assembleStream(chunks: JsonObject[]): JsonObject {
  const choices = new Map<number, ChoiceParts>();
  let head: JsonObject = {};
  let usage: unknown;
  let promptTokenIds: unknown;
  for (const chunk of chunks) {
    if (!isObject(chunk)) continue;
    if (head.id === undefined) head = { id: chunk.id, created: chunk.created, model: chunk.model };
    if (chunk.usage !== undefined && chunk.usage !== null) usage = chunk.usage;
    if (promptTokenIds === undefined && isTokenIds(chunk.prompt_token_ids)) promptTokenIds = chunk.prompt_token_ids;
    for (const c of Array.isArray(chunk.choices) ? chunk.choices : []) {
      if (!isObject(c)) continue;
      const index = typeof c.index === "number" ? c.index : 0;
      const parts: ChoiceParts = choices.get(index) ?? {
        role: null,
        text: [],
        finishReason: null,
        toolCalls: new Map(),
        tokenIds: [],
        promptTokenIds: null,
        isChat: false,
      };
      choices.set(index, parts);
      const delta = isObject(c.delta) ? c.delta : null;
      if (delta) {
        parts.isChat = true;
        if (typeof delta.role === "string") parts.role = delta.role;
        if (typeof delta.content === "string") parts.text.push(delta.content);
        for (const tc of Array.isArray(delta.tool_calls) ? delta.tool_calls : []) {
          if (!isObject(tc)) continue;
          const at = typeof tc.index === "number" ? tc.index : parts.toolCalls.size;
          const call = parts.toolCalls.get(at) ?? { name: [], arguments: [] };
          parts.toolCalls.set(at, call);
          if (tc.id !== undefined) call.id = tc.id;
          if (tc.type !== undefined) call.type = tc.type;
          const fn = isObject(tc.function) ? tc.function : {};
          if (typeof fn.name === "string") call.name.push(fn.name);
          if (typeof fn.arguments === "string") call.arguments.push(fn.arguments);
        }
      } else if (typeof c.text === "string") parts.text.push(c.text);
      if (c.finish_reason !== undefined && c.finish_reason !== null) parts.finishReason = c.finish_reason;
      if (Array.isArray(c.token_ids)) parts.tokenIds.push(...(c.token_ids as number[]));
      if (parts.promptTokenIds === null && isTokenIds(c.prompt_token_ids)) parts.promptTokenIds = c.prompt_token_ids;
    }
  }
  const ordered = [...choices.entries()].sort(([a], [b]) => a - b);
  const isChat = ordered.some(([, p]) => p.isChat);
  const body: JsonObject = {
    ...head,
    object: isChat ? "chat.completion" : "text_completion",
    choices: ordered.map(([index, p]) => {
      const choice: JsonObject = { index, finish_reason: p.finishReason };
      if (isChat) {
        const toolCalls = [...p.toolCalls.entries()]
          .sort(([a], [b]) => a - b)
          .map(([, c]) => ({ id: c.id, type: c.type ?? "function", function: { name: c.name.join(""), arguments: c.arguments.join("") } }));
        const text = p.text.join("");
        choice.message = {
          role: p.role ?? "assistant",
          content: text === "" && toolCalls.length > 0 ? null : text,
          ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
        };
      } else choice.text = p.text.join("");
      if (p.tokenIds.length > 0) choice.token_ids = p.tokenIds;
      if (p.promptTokenIds) choice.prompt_token_ids = p.promptTokenIds;
      return choice;
    }),
  };
  if (usage !== undefined) body.usage = usage;
  if (promptTokenIds !== undefined) body.prompt_token_ids = promptTokenIds;
  return body;
}
