/**
 * Chat templates of `tokenizer_config.json`, rendered with `@huggingface/jinja` (Hugging Face's own
 * Jinja implementation for chat templates) the way transformers' `apply_chat_template` calls them:
 * `messages`, `add_generation_prompt`, `tools` (only when given), the special-token strings,
 * assistant tool calls with their arguments as objects, and transformers' `strftime_now` and
 * `raise_exception` helpers.
 */
import { Environment, Interpreter, Template } from "@huggingface/jinja";
import { ValidationError } from "../../types/errors.ts";
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

/**
 * Tool-call format a template teaches the model: Hermes-style `<tool_call>` JSON (Qwen2.5, Qwen3), or
 * Llama 3.1+'s bare `{"name": ..., "parameters": ...}` JSON (a Llama 3 header template that mentions
 * `"parameters"` or `<|python_tag|>`; Llama 3.0's template has neither and gets null).
 */
export function detectToolCallFormat(template: string | null): ToolCallFormat {
  if (!template) return null;
  if (template.includes("<tool_call>")) return "hermes";
  if (template.includes("<|start_header_id|>") && (template.includes("<|python_tag|>") || /["']parameters["']/.test(template)))
    return "llama3-json";
  return null;
}

const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"];
const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

/**
 * transformers' `strftime_now(format)`: the local time through Python's strftime, whose names are the
 * C locale's (English). @huggingface/jinja's own takes month names from the runtime's locale ("Sept"
 * under en-GB, "nov." under French), so Llama 3.2's "Today Date" would differ by machine.
 */
export function strftime(date: Date, format: string): string {
  const pad = (n: number, w = 2): string => String(n).padStart(w, "0");
  const h12 = date.getHours() % 12 === 0 ? 12 : date.getHours() % 12;
  return format.replace(/%[YymdbBaAHIMSpj%]/g, (t) => {
    switch (t) {
      case "%Y":
        return String(date.getFullYear());
      case "%y":
        return pad(date.getFullYear() % 100);
      case "%m":
        return pad(date.getMonth() + 1);
      case "%d":
        return pad(date.getDate());
      case "%b":
        return MONTHS[date.getMonth()].slice(0, 3);
      case "%B":
        return MONTHS[date.getMonth()];
      case "%a":
        return DAYS[date.getDay()].slice(0, 3);
      case "%A":
        return DAYS[date.getDay()];
      case "%H":
        return pad(date.getHours());
      case "%I":
        return pad(h12);
      case "%M":
        return pad(date.getMinutes());
      case "%S":
        return pad(date.getSeconds());
      case "%p":
        return date.getHours() < 12 ? "AM" : "PM";
      case "%j": {
        const start = new Date(date.getFullYear(), 0, 1);
        return pad(Math.floor((date.getTime() - start.getTime()) / 86_400_000) + 1, 3);
      }
      default:
        return "%";
    }
  });
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

/** Python's range(stop) / range(start, stop[, step]). */
function range(start: number, stop?: number, step = 1): number[] {
  if (stop === undefined) [start, stop] = [0, start];
  if (step === 0) throw new Error("range() step must not be zero");
  const out: number[] = [];
  for (let i = start; step > 0 ? i < stop : i > stop; i += step) out.push(i);
  return out;
}

/** The globals @huggingface/jinja's Template.render declares (0.5.x), with our strftime_now. */
const GLOBALS: Record<string, unknown> = {
  false: false,
  true: true,
  none: null,
  False: false,
  True: true,
  None: null,
  range,
  raise_exception: (message: unknown) => {
    throw new Error(String(message));
  },
  strftime_now: (format: string) => strftime(new Date(), format),
};

export class ChatTemplate {
  private readonly compiled = new Map<string, Template>();
  /**
   * `specials`: the special-token strings (`bos_token`, ...); `extra`: more template variables for
   * every render (e.g. Qwen3's `enable_thinking: false`), as transformers' extra `apply_chat_template`
   * keyword arguments; they cannot replace `messages`, `tools` or `add_generation_prompt`.
   */
  constructor(
    private readonly raw: unknown,
    private readonly specials: Record<string, string | null>,
    private readonly extra: Record<string, unknown> = {},
  ) {}

  /** The template tool calls are written under: the "tool_use" one of a named list, else the default. */
  get toolTemplate(): string | null {
    return selectTemplate(this.raw, true);
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
      ...GLOBALS,
      ...this.specials,
      ...this.extra,
      messages: templateMessages(messages),
      add_generation_prompt: options.addGenerationPrompt === true,
    };
    if (tools) vars.tools = tools;
    try {
      // Template.render would declare the library's own strftime_now first (and refuse ours), so the
      // environment is built here, with the same globals.
      const env = new Environment();
      for (const [name, value] of Object.entries(vars)) env.set(name, value);
      return new Interpreter(env).run(t.parsed).value as string;
    } catch (e) {
      // raise_exception(...) in a template refuses the conversation (Llama 3.2: more than one tool
      // call in a message); a template that fails on these messages is bad input too.
      throw new ValidationError(`the chat template cannot render these messages: ${(e as Error).message}`, ["messages"]);
    }
  }
}
