/**
 * LLM-call spans in the OpenTelemetry GenAI semantic conventions, as instrumentations other than Agent
 * Lightning's record them: the operation (`gen_ai.operation.name`), token usage under either generation of
 * key names, and messages as JSON text (`gen_ai.input.messages`, `gen_ai.output.messages`,
 * `gen_ai.system_instructions`, `gen_ai.tool.definitions`). Messages come out in the shape the indexed
 * `gen_ai.prompt.*` / `gen_ai.completion.*` attributes unflatten to, so the adapters read both alike
 * (docs/adapters.md#genai-semantic-convention-spans).
 */
import { ValidationError } from "../types/errors.ts";
import type { Span } from "../types/span.ts";

type Obj = Record<string, unknown>;

/** `gen_ai.operation.name` values of a model call that yields a completion. */
export const GEN_AI_LLM_OPERATIONS: ReadonlySet<string> = new Set(["chat", "text_completion"]);

export const isGenAiLlmCall = (span: Span): boolean => {
  const op = span.attributes["gen_ai.operation.name"];
  return typeof op === "string" && GEN_AI_LLM_OPERATIONS.has(op);
};

export interface TokenUsage {
  prompt_tokens: number | null;
  completion_tokens: number | null;
}

const count = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) ? v : null);

/** Token usage from `gen_ai.usage.prompt_tokens/completion_tokens`, else `gen_ai.usage.input_tokens/output_tokens`; null when neither. */
export function tokenUsage(attrs: Obj): TokenUsage | null {
  const prompt = count(attrs["gen_ai.usage.prompt_tokens"]) ?? count(attrs["gen_ai.usage.input_tokens"]);
  const completion = count(attrs["gen_ai.usage.completion_tokens"]) ?? count(attrs["gen_ai.usage.output_tokens"]);
  return prompt === null && completion === null ? null : { prompt_tokens: prompt, completion_tokens: completion };
}

/** A JSON-text attribute (an already-parsed array also passes); undefined when absent. */
function jsonArray(attrs: Obj, key: string): unknown[] | undefined {
  const raw = attrs[key];
  if (raw === undefined || raw === null) return undefined;
  let v: unknown = raw;
  if (typeof raw === "string") {
    try {
      v = JSON.parse(raw);
    } catch (err) {
      throw new ValidationError(`${key} is not valid JSON: ${(err as Error).message}`, ["attributes", key]);
    }
  }
  if (!Array.isArray(v)) throw new ValidationError(`${key} must be a JSON array`, ["attributes", key]);
  return v;
}

const asText = (v: unknown): string => (typeof v === "string" ? v : JSON.stringify(v));

/** An OpenAI content part for a media part (`uri` or `blob`, image modality), else null. */
function imagePart(p: Obj): Obj | null {
  if (p.modality !== "image") return null;
  if (p.type === "uri" && typeof p.uri === "string") return { type: "image_url", image_url: { url: p.uri } };
  if (p.type === "blob" && typeof p.content === "string") {
    return { type: "image_url", image_url: { url: `data:${p.mime_type ?? "image/*"};base64,${p.content}` } };
  }
  return null;
}

/**
 * One semconv message to items of the indexed shape. Text parts are joined; image parts make the content
 * a list of OpenAI content parts; `tool_call` parts become `tool_calls` ({id, name, arguments}); each
 * `tool_call_response` part becomes its own `tool` message. Other parts (reasoning, files) have no place
 * in a chat message and are left out. A message without `parts` is taken to be in OpenAI's shape.
 */
function toItems(m: unknown, where: (string | number)[]): Obj[] {
  if (typeof m !== "object" || m === null || Array.isArray(m)) throw new ValidationError("a message must be an object", where);
  const msg = m as Obj;
  if (!Array.isArray(msg.parts)) return [fromOpenAiMessage(msg)];
  const parts = msg.parts as Obj[];
  const texts: string[] = [];
  const media: Obj[] = [];
  const calls: Obj[] = [];
  const items: Obj[] = [];
  for (const p of parts) {
    if (p?.type === "text") texts.push(asText(p.content));
    else if (p?.type === "tool_call")
      calls.push({ id: p.id ?? null, name: p.name, arguments: p.arguments === undefined ? "" : asText(p.arguments) });
    else if (p?.type === "tool_call_response") items.push({ role: "tool", content: asText(p.response), tool_call_id: p.id ?? null });
    else {
      const image = p && typeof p === "object" ? imagePart(p) : null;
      if (image) media.push(image);
    }
  }
  if (items.length > 0 && texts.length === 0 && media.length === 0 && calls.length === 0) return items;
  const item: Obj = { role: msg.role };
  if (media.length > 0) item.content = [...texts.map((text) => ({ type: "text", text })), ...media];
  else if (texts.length > 0) item.content = texts.join("");
  else item.content = null;
  if (calls.length > 0) item.tool_calls = calls;
  if (typeof msg.name === "string") item.name = msg.name;
  if (msg.finish_reason !== undefined) item.finish_reason = msg.finish_reason;
  return [item, ...items];
}

/** A message without `parts`, as some instrumentations write it: OpenAI's own message shape. */
function fromOpenAiMessage(msg: Obj): Obj {
  const item: Obj = { ...msg, content: msg.content ?? null };
  if (Array.isArray(msg.tool_calls)) {
    item.tool_calls = (msg.tool_calls as Obj[]).map((c) => {
      const fn = (typeof c?.function === "object" && c.function !== null ? c.function : c) as Obj;
      return { id: c?.id ?? null, name: fn.name, arguments: fn.arguments === undefined ? "" : asText(fn.arguments) };
    });
  }
  return item;
}

/** `gen_ai.system_instructions`: a JSON part list, or (as some instrumentations write it) plain text. */
function systemParts(attrs: Obj): unknown[] | undefined {
  const raw = attrs["gen_ai.system_instructions"];
  if (typeof raw === "string") {
    try {
      const parsed: unknown = JSON.parse(raw);
      if (Array.isArray(parsed)) return parsed;
    } catch {
      // Not JSON: the instructions themselves.
    }
    return [{ type: "text", content: raw }];
  }
  return jsonArray(attrs, "gen_ai.system_instructions");
}

/** `gen_ai.system_instructions` as a system message, then `gen_ai.input.messages`; null when neither is set. */
export function semconvInputMessages(attrs: Obj): Obj[] | null {
  const input = jsonArray(attrs, "gen_ai.input.messages");
  const system = systemParts(attrs);
  if (input === undefined && system === undefined) return null;
  const items = system === undefined ? [] : toItems({ role: "system", parts: system }, ["attributes", "gen_ai.system_instructions"]);
  (input ?? []).forEach((m, i) => items.push(...toItems(m, ["attributes", "gen_ai.input.messages", i])));
  return items;
}

/** `gen_ai.output.messages` as completion items (with `finish_reason`); null when not set. */
export function semconvOutputMessages(attrs: Obj): Obj[] | null {
  const output = jsonArray(attrs, "gen_ai.output.messages");
  if (output === undefined) return null;
  return output.flatMap((m, i) => toItems(m, ["attributes", "gen_ai.output.messages", i]));
}

/** `gen_ai.tool.definitions` as `{name, description, parameters}` entries (the shape of `gen_ai.request.functions`); null when not set. */
export function semconvToolDefinitions(attrs: Obj): Obj[] | null {
  const defs = jsonArray(attrs, "gen_ai.tool.definitions");
  if (defs === undefined) return null;
  return defs.map((d, i) => {
    if (typeof d !== "object" || d === null)
      throw new ValidationError("a tool definition must be an object", ["attributes", "gen_ai.tool.definitions", i]);
    const def = d as Obj;
    // Either the flat semconv form or an OpenAI tool ({type: "function", function: {...}}).
    const fn = typeof def.function === "object" && def.function !== null ? (def.function as Obj) : def;
    return { name: fn.name, description: fn.description, parameters: fn.parameters };
  });
}
