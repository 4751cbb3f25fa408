/**
 * Tool calls in a model's text → OpenAI `tool_calls`, by the format the model's chat template teaches
 * (the tokenizer's `toolCallFormat`):
 * - "hermes" (Qwen2.5, Qwen3): `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, any
 *   number of them; the text outside them is the message content.
 * - "llama3-json" (Llama 3.1/3.2): the whole message is `{"name": ..., "parameters": {...}}`
 *   (optionally after `<|python_tag|>`), or several such objects separated by `;`.
 * Anything that does not parse stays in the content: a malformed call is never dropped.
 */
import type { ToolCall, ToolCallFormat } from "../model/tokenizer-api.ts";
import { newSpanId } from "../types/ids.ts";

export interface ParsedToolCalls {
  /** Text outside the calls (trimmed), null when there is none and calls were found. */
  content: string | null;
  toolCalls: ToolCall[];
}

function callFrom(value: unknown, argsKey: "arguments" | "parameters"): ToolCall | null {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return null;
  const v = value as Record<string, unknown>;
  if (typeof v.name !== "string" || v.name.length === 0) return null;
  const args = v[argsKey] ?? v.arguments ?? {};
  return {
    id: `call_${newSpanId()}`,
    type: "function",
    function: { name: v.name, arguments: typeof args === "string" ? args : JSON.stringify(args) },
  };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

const HERMES = /<tool_call>\s*([\s\S]*?)\s*<\/tool_call>/g;

function parseHermes(text: string): ParsedToolCalls {
  const toolCalls: ToolCall[] = [];
  let content = "";
  let last = 0;
  for (const m of text.matchAll(HERMES)) {
    const call = callFrom(parseJson(m[1]), "arguments");
    if (call === null) continue; // malformed: left in the content below
    toolCalls.push(call);
    content += text.slice(last, m.index);
    last = m.index + m[0].length;
  }
  content += text.slice(last);
  if (toolCalls.length === 0) return { content: text, toolCalls };
  const trimmed = content.trim();
  return { content: trimmed.length ? trimmed : null, toolCalls };
}

function parseLlama3(text: string): ParsedToolCalls {
  const body = text
    .trim()
    .replace(/^<\|python_tag\|>/, "")
    .trim();
  if (!body.startsWith("{")) return { content: text, toolCalls: [] };
  const whole = parseJson(body);
  const parts = whole !== undefined ? [whole] : body.split(/\s*;\s*(?=\{)/).map(parseJson);
  const toolCalls = parts.map((p) => callFrom(p, "parameters"));
  if (toolCalls.length === 0 || toolCalls.some((c) => c === null)) return { content: text, toolCalls: [] };
  return { content: null, toolCalls: toolCalls as ToolCall[] };
}

/** Tool calls in `text` for a model whose template uses `format`; none for a null format. */
export function parseToolCalls(text: string, format: ToolCallFormat): ParsedToolCalls {
  if (format === "hermes") return parseHermes(text);
  if (format === "llama3-json") return parseLlama3(text);
  return { content: text, toolCalls: [] };
}
