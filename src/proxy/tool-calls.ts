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

const OPEN = "<tool_call>";
const CLOSE = "</tool_call>";

/** The call opened at `open`: the first closing tag after which the body parses (an argument's string
 * may itself hold "</tool_call>"), or null with the end of the first closing tag when none does. */
function hermesCall(text: string, open: number): { call: ToolCall | null; end: number } | null {
  const body = open + OPEN.length;
  const first = text.indexOf(CLOSE, body);
  if (first < 0) return null;
  for (let close = first; close >= 0; close = text.indexOf(CLOSE, close + CLOSE.length)) {
    const call = callFrom(parseJson(text.slice(body, close).trim()), "arguments");
    if (call !== null) return { call, end: close + CLOSE.length };
  }
  return { call: null, end: first + CLOSE.length };
}

function parseHermes(text: string): ParsedToolCalls {
  const toolCalls: ToolCall[] = [];
  let content = "";
  let last = 0;
  for (let open = text.indexOf(OPEN); open >= 0; ) {
    const found = hermesCall(text, open);
    if (found === null) break; // never closed: stays in the content
    if (found.call !== null) {
      toolCalls.push(found.call);
      content += text.slice(last, open);
      last = found.end;
    } // malformed: left in the content
    open = text.indexOf(OPEN, found.end);
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
