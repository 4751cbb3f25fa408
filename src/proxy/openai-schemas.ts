/**
 * The parts of the OpenAI request bodies the policy server understands. Unknown keys are accepted and
 * ignored (clients send many), known keys are checked.
 */
import { z } from "zod";
import { MAX_TOP_LOGPROBS } from "../model/generation.ts";

// The models served read text only: an image, audio or file part is refused rather than dropped.
const TextPart = z.looseObject({ type: z.string(), text: z.string().optional() }).refine((p) => p.type === "text" && p.text !== undefined, {
  message: "only text content parts ({ type: 'text', text }) are supported: the model reads text",
});
const Content = z.union([z.string(), z.array(TextPart), z.null()]);

const ToolCallInput = z.looseObject({
  id: z.string(),
  type: z.literal("function").optional(),
  function: z.looseObject({ name: z.string(), arguments: z.string() }),
});

export const ChatMessageInput = z.looseObject({
  role: z.enum(["system", "developer", "user", "assistant", "tool"]),
  content: Content.optional(),
  tool_calls: z.array(ToolCallInput).nullable().optional(),
  tool_call_id: z.string().optional(),
  name: z.string().optional(),
});

const ToolInput = z.looseObject({
  type: z.literal("function"),
  function: z.looseObject({
    name: z.string().min(1),
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
  }),
});
export type ChatMessageInput = z.infer<typeof ChatMessageInput>;

const Stop = z.union([z.string(), z.array(z.string()).max(8), z.null()]).optional();

/** Sampling fields shared by both endpoints (OpenAI names, plus vLLM's `stop_token_ids`). */
const sampling = {
  model: z.string(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().gt(0).max(1).nullable().optional(),
  max_tokens: z.number().int().min(0).nullable().optional(),
  n: z.number().int().min(1).max(64).nullable().optional(),
  stop: Stop,
  stop_token_ids: z.array(z.number().int()).nullable().optional(),
  seed: z.number().int().nullable().optional(),
  stream: z.boolean().nullable().optional(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullable().optional(),
  user: z.string().optional(),
};

export const ChatCompletionRequest = z.looseObject({
  ...sampling,
  messages: z.array(ChatMessageInput).min(1),
  tools: z.array(ToolInput).nullable().optional(),
  tool_choice: z
    .union([z.enum(["none", "auto", "required"]), z.looseObject({ type: z.literal("function") })])
    .nullable()
    .optional(),
  max_completion_tokens: z.number().int().min(0).nullable().optional(),
  logprobs: z.boolean().nullable().optional(),
  top_logprobs: z.number().int().min(0).max(MAX_TOP_LOGPROBS).nullable().optional(),
});
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>;

export const CompletionRequest = z.looseObject({
  ...sampling,
  prompt: z.union([z.string(), z.array(z.number().int()).min(1)]),
  logprobs: z.number().int().min(0).max(5).nullable().optional(),
  echo: z.literal(false).nullable().optional(),
  /** vLLM's: text prompts get what the tokenizer's post-processor adds (e.g. Llama 3's BOS) [true]. */
  add_special_tokens: z.boolean().nullable().optional(),
});
export type CompletionRequest = z.infer<typeof CompletionRequest>;

/** Text of a message's content (text parts joined). */
export function contentText(content: ChatMessageInput["content"]): string {
  if (content === undefined || content === null) return "";
  if (typeof content === "string") return content;
  return content.map((p) => p.text ?? "").join("");
}

export function stopList(stop: string | string[] | null | undefined): string[] {
  if (stop === undefined || stop === null) return [];
  return typeof stop === "string" ? [stop] : stop;
}
