/**
 * Chat templates of `tokenizer_config.json`, rendered with `@huggingface/jinja` (Hugging Face's own
 * Jinja implementation for chat templates) the way transformers' `apply_chat_template` calls them:
 * `messages`, `add_generation_prompt`, `tools` (only when given), the special-token strings, and
 * assistant tool calls with their arguments as objects.
 */
import { Template } from "@huggingface/jinja";
import type { ChatTemplateOptions, TemplateMessage, ToolCallFormat } from "../tokenizer-api.ts";
import { HfFormatError } from "./errors.ts";

const FILE = "tokenizer_config.json";

/** The template to use: a string, or the named list's "tool_use" (when tools are given) or "default". */
export function selectTemplate(raw: unknown, withTools: boolean): string | null {
  if (raw === undefined || raw === null) return null;
  if (typeof raw === "string") return raw;
  if (!Array.isArray(raw)) throw new HfFormatError(FILE, "chat_template", "must be a string or a list of {name, template}");
  const byName = new Map<string, string>();
  for (const t of raw as Array<{ name?: unknown; template?: unknown }>)
    if (typeof t?.name === "string" && typeof t.template === "string") byName.set(t.name, t.template);
  return (withTools ? byName.get("tool_use") : undefined) ?? byName.get("default") ?? null;
}

/** Tool-call format a template teaches the model. */
export function detectToolCallFormat(template: string | null): ToolCallFormat {
  if (!template) return null;
  if (template.includes("<tool_call>")) return "hermes";
  if (template.includes("<|python_tag|>") || /"parameters"/.test(template) || template.includes("'parameters'")) return "llama3-json";
  return null;
}

/** Templates index `tool_call.function.arguments` as an object (`| tojson`), OpenAI sends a JSON string. */
function templateMessages(messages: readonly TemplateMessage[]): Record<string, unknown>[] {
  return messages.map((m) => {
    const out: Record<string, unknown> = { role: m.role, content: m.content ?? "" };
    if (m.name !== undefined) out.name = m.name;
    if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
    if (m.tool_calls?.length)
      out.tool_calls = m.tool_calls.map((c) => {
        let args: unknown = c.function.arguments;
        try {
          args = JSON.parse(c.function.arguments);
        } catch {
          // not JSON: the template gets the text as the model wrote it
        }
        return { id: c.id, type: c.type, function: { name: c.function.name, arguments: args } };
      });
    return out;
  });
}

export class ChatTemplate {
  private readonly compiled = new Map<string, Template>();
  constructor(
    private readonly raw: unknown,
    private readonly specials: Record<string, string | null>,
  ) {}

  get source(): string | null {
    return selectTemplate(this.raw, false);
  }

  render(messages: readonly TemplateMessage[], options: ChatTemplateOptions = {}): string {
    const tools = options.tools?.length ? options.tools : undefined;
    const text = selectTemplate(this.raw, tools !== undefined);
    if (text === null) throw new HfFormatError(FILE, "chat_template", "the tokenizer has no chat template");
    let t = this.compiled.get(text);
    if (!t) {
      try {
        t = new Template(text);
      } catch (e) {
        throw new HfFormatError(FILE, "chat_template", `does not parse: ${(e as Error).message}`);
      }
      this.compiled.set(text, t);
    }
    const vars: Record<string, unknown> = {
      messages: templateMessages(messages),
      add_generation_prompt: options.addGenerationPrompt === true,
      ...this.specials,
    };
    if (tools) vars.tools = tools;
    return t.render(vars);
  }
}
