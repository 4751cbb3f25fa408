/**
 * The chat client APO's critic and editor calls go to: anything with `chat.completions.create(body)`
 * (the `openai` package's client fits), and `createOpenAiClient`, which builds one from the optional
 * `openai` peer dependency for an OpenAI-compatible endpoint given by options or environment.
 */
import { platform } from "../platform/index.ts";
import { RuntimeError } from "../runner/errors.ts";
import { ValidationError } from "../types/errors.ts";
import type { ChatMessage } from "./apo-prompts.ts";

/** The optional peer dependency, imported by name so bundlers and the published types do not require it. */
const OPENAI = "openai";

export interface ChatCompletionBody {
  model: string;
  messages: ChatMessage[];
  temperature?: number;
}

/** An OpenAI-compatible chat client, typed by shape so `openai` need not be installed. */
export interface ChatCompletionsClient {
  chat: { completions: { create(body: ChatCompletionBody): PromiseLike<unknown> } };
}

export interface OpenAiClientOptions {
  /** The endpoint, e.g. `http://localhost:8000/v1` [env OPENAI_BASE_URL; the openai package's default, api.openai.com]. */
  baseURL?: string;
  /** [env OPENAI_API_KEY; "EMPTY" when only a base URL is given, as local servers such as vLLM accept]. */
  apiKey?: string;
  /** Retries of a failed call inside the client [2, the openai package's default]. */
  maxRetries?: number;
  /** Seconds before a call is abandoned [600]. */
  timeoutSeconds?: number;
}

/** The text of `choices[0].message.content` of a chat completion, or null when the answer has none. */
export function completionText(response: unknown): string | null {
  const choices = (response as { choices?: unknown } | null)?.choices;
  if (!Array.isArray(choices) || choices.length === 0) return null;
  const content = (choices[0] as { message?: { content?: unknown } } | null)?.message?.content;
  return typeof content === "string" ? content : null;
}

/**
 * An `openai` client for an OpenAI-compatible endpoint. Needs a base URL or an API key (options or
 * OPENAI_BASE_URL / OPENAI_API_KEY); throws when neither is set or when `openai` is not installed.
 */
export async function createOpenAiClient(options: OpenAiClientOptions = {}): Promise<ChatCompletionsClient> {
  const baseURL = options.baseURL ?? platform.env("OPENAI_BASE_URL") ?? undefined;
  const apiKey = options.apiKey ?? platform.env("OPENAI_API_KEY") ?? undefined;
  if (!baseURL && !apiKey)
    throw new ValidationError(
      "no OpenAI-compatible endpoint: set OPENAI_BASE_URL (and OPENAI_API_KEY if the endpoint needs one), or pass baseURL/apiKey",
      ["baseURL"],
    );
  let OpenAI: new (o: Record<string, unknown>) => ChatCompletionsClient;
  try {
    OpenAI = ((await import(OPENAI)) as { default: typeof OpenAI }).default;
  } catch (e) {
    throw new RuntimeError("the 'openai' package is needed for a default chat client: npm install openai (or pass your own client)", {
      cause: e,
    });
  }
  return new OpenAI({
    baseURL,
    apiKey: apiKey || "EMPTY",
    ...(options.maxRetries !== undefined ? { maxRetries: options.maxRetries } : {}),
    ...(options.timeoutSeconds !== undefined ? { timeout: options.timeoutSeconds * 1000 } : {}),
  });
}
