/** TraceToMessages: spans -> OpenAI chat fine-tuning records `{messages, tools}` (docs/adapters.md#tracetomessages). */
import { ValidationError } from "../types/errors.ts";
import { setOwn } from "../types/own-keys.ts";
import type { Span } from "../types/span.ts";
import { semconvInputMessages, semconvOutputMessages, semconvToolDefinitions } from "./semconv.ts";
import { TraceAdapter } from "./types.ts";

type Obj = Record<string, unknown>;

/** Regroups `prefix.*` attributes into a list (leading numeric index) or a dict (by first segment). */
export function groupGenai(attrs: Obj, prefix: string): unknown {
  const stripped: [string, unknown][] = [];
  for (const [k, v] of Object.entries(attrs)) if (k.startsWith(prefix + ".")) stripped.push([k.slice(prefix.length + 1), v]);
  if (stripped.some(([k]) => /^\d+$/.test(k.split(".")[0]))) {
    const byIndex = new Map<number, Obj>();
    for (const [k, v] of stripped) {
      const dot = k.indexOf(".");
      const head = dot < 0 ? k : k.slice(0, dot);
      if (!/^\d+$/.test(head)) continue;
      const rest = dot < 0 ? "" : k.slice(dot + 1);
      const group = byIndex.get(Number(head)) ?? {};
      group[rest === "" ? prefix : `${prefix}.${rest}`] = v;
      byIndex.set(Number(head), group);
    }
    return [...byIndex.keys()].sort((a, b) => a - b).map((i) => groupGenai(byIndex.get(i)!, prefix));
  }
  const out: Obj = {};
  const nested = new Map<string, Obj>();
  for (const [k, v] of stripped) {
    const dot = k.indexOf(".");
    if (dot < 0) {
      setOwn(out, k, v);
      continue;
    }
    const head = k.slice(0, dot);
    const group = nested.get(head) ?? {};
    group[`${prefix}.${k}`] = v;
    nested.set(head, group);
  }
  for (const [head, group] of nested) setOwn(out, head, groupGenai(group, `${prefix}.${head}`));
  return out;
}

const ROLES = new Set(["system", "developer", "user", "assistant", "tool", "function"]);
const isEmpty = (v: unknown) => (Array.isArray(v) ? v.length === 0 : typeof v === "object" && v !== null && Object.keys(v).length === 0);

function validateMessage(m: Obj, i: number): void {
  if (!ROLES.has(m.role as string))
    throw new ValidationError(`message ${i} has an unknown role ${JSON.stringify(m.role)}`, ["messages", i, "role"]);
  if (m.role === "tool" && typeof m.tool_call_id !== "string") {
    throw new ValidationError(`tool message ${i} needs a string tool_call_id`, ["messages", i, "tool_call_id"]);
  }
  if (m.role === "function" && typeof m.name !== "string")
    throw new ValidationError(`function message ${i} needs a name`, ["messages", i, "name"]);
}

export interface ChatRecord {
  messages: Obj[];
  tools: Obj[] | null;
}

export class TraceToMessages extends TraceAdapter<ChatRecord[]> {
  adapt(spans: Span[]): ChatRecord[] {
    const out: ChatRecord[] = [];
    for (const span of spans) {
      const attrs = span.attributes as Obj;
      const prompt = groupGenai(attrs, "gen_ai.prompt");
      const completion = groupGenai(attrs, "gen_ai.completion");
      const request = groupGenai(attrs, "gen_ai.request");
      const response = groupGenai(attrs, "gen_ai.response");
      const list = (v: unknown, what: string): Obj[] => {
        if (isEmpty(v)) return [];
        if (!Array.isArray(v)) throw new ValidationError(`${what} must be a list`, ["attributes", what]);
        return v as Obj[];
      };
      const dict = (v: unknown, what: string): Obj => {
        if (typeof v !== "object" || v === null || Array.isArray(v)) {
          if (isEmpty(v)) return {};
          throw new ValidationError(`${what} must be an object`, ["attributes", what]);
        }
        return v as Obj;
      };
      // Semantic-convention JSON messages only where the indexed keys (upstream's) are absent.
      let promptItems = list(prompt, "gen_ai.prompt"),
        completionItems = list(completion, "gen_ai.completion");
      if (promptItems.length === 0) promptItems = semconvInputMessages(attrs) ?? [];
      if (completionItems.length === 0) completionItems = semconvOutputMessages(attrs) ?? [];
      const req = dict(request, "gen_ai.request"),
        resp = dict(response, "gen_ai.response");
      if (promptItems.length === 0 && completionItems.length === 0 && isEmpty(req) && isEmpty(resp)) continue;

      const tools: Obj[] = [];
      for (const child of spans) {
        if (child.parent_id !== span.span_id) continue;
        const tool = groupGenai(child.attributes as Obj, "tool");
        if (typeof tool !== "object" || tool === null || Array.isArray(tool))
          throw new ValidationError("tool attributes must form an object", ["attributes", "tool"]);
        if (!isEmpty(tool)) tools.push(tool as Obj);
      }

      const messages: Obj[] = [];
      for (const item of promptItems) {
        if (item.role === "assistant" && Array.isArray(item.tool_calls)) {
          messages.push({
            role: "assistant",
            content: null,
            tool_calls: (item.tool_calls as Obj[]).map((c) => ({
              id: c.id,
              type: "function",
              function: { name: c.name, arguments: c.arguments },
            })),
          });
        } else {
          const m: Obj = { role: item.role, content: item.content ?? "" };
          if (item.role === "tool") m.tool_call_id = item.tool_call_id;
          if (item.role === "function") m.name = item.name;
          messages.push(m);
        }
      }
      for (const item of completionItems) {
        if (item.role !== "assistant") continue;
        const m: Obj = { role: "assistant", content: item.content ?? null };
        if (tools.length > 0) {
          m.tool_calls = tools.map((t) => {
            const call = (t.call ?? {}) as Obj;
            return { id: call.id, type: call.type, function: { name: t.name, arguments: t.parameters } };
          });
        } else if (Array.isArray(item.tool_calls)) {
          // Calls recorded on the completion itself (gen_ai.completion.N.tool_calls.M.*, as the LLM proxy and the
          // traced openai client write them) when no child tool spans exist (docs/departures.md).
          m.tool_calls = (item.tool_calls as Obj[]).map((c) => ({
            id: c.id,
            type: c.type ?? "function",
            function: { name: c.name, arguments: c.arguments },
          }));
        }
        messages.push(m);
      }
      messages.forEach(validateMessage);

      const functions = req.functions ?? semconvToolDefinitions(attrs);
      const toolDefs = Array.isArray(functions)
        ? (functions as Obj[]).map((fn) => ({
            type: "function",
            function: {
              name: fn.name,
              description: fn.description ?? "",
              parameters: typeof fn.parameters === "string" ? JSON.parse(fn.parameters) : fn.parameters,
            },
          }))
        : null;
      out.push({ messages, tools: toolDefs });
    }
    return out;
  }
}
