/**
 * APO test fixtures: a scripted OpenAI-compatible critic and editor (in process, or served by Hono for
 * the real `openai` client), and an agent whose reward depends on what its rendered prompt says.
 */
import { serve } from "@hono/node-server";
import { trace } from "@opentelemetry/api";
import { Hono } from "hono";
import type { AddressInfo } from "node:net";
import type { ChatCompletionBody, ChatCompletionsClient } from "../../src/algorithm/index.ts";
import { promptRollout } from "../../src/runner/index.ts";
import { emitReward, openAiCallAttributes } from "../../src/tracer/index.ts";
import { renderPromptTemplate, type PromptTemplate } from "../../src/types/index.ts";

/** The words a prompt must say to earn reward: half a point each. */
export const KEYWORDS = ["CONCISE", "CITE"] as const;

export const seedTemplate: PromptTemplate = { resource_type: "prompt_template", template: "Answer: {question}", engine: "f-string" };

export const tagged = (tag: string, text: string): string | null =>
  new RegExp(`<${tag}>\\n([\\s\\S]*?)\\n</${tag}>`).exec(text)?.[1] ?? null;

export interface ScriptOptions {
  /** What the critic answers (the whole response body); default: names the first missing keyword. */
  critic?: (template: string, prompt: string) => unknown;
  /** Every `badEvery`-th edit (1-based) replaces the template by a useless one [2]; 0: never. */
  badEvery?: number;
}

/**
 * Plays the critic (model "critic") and the editor (model "editor"): the critique names the first
 * keyword the template lacks ("Tell it to be CONCISE."), and the edit appends that keyword to the template,
 * except every `badEvery`-th edit, which returns a template without any keyword or placeholder.
 */
export function scriptedChat(options: ScriptOptions = {}) {
  const calls: ChatCompletionBody[] = [];
  let edits = 0;
  const badEvery = options.badEvery ?? 2;
  const reply = (content: unknown) => ({
    id: "c",
    object: "chat.completion",
    choices: [{ index: 0, message: { role: "assistant", content } }],
  });
  const respond = (body: ChatCompletionBody): unknown => {
    calls.push(body);
    const text = body.messages.map((m) => m.content).join("\n");
    const template = tagged("prompt_template", text) ?? "";
    if (body.model === "critic") {
      if (options.critic) return options.critic(template, text);
      const missing = KEYWORDS.find((k) => !template.includes(k));
      return reply(missing ? `- Tell the model to ${missing}.` : "- Nothing to change.");
    }
    edits++;
    if (badEvery > 0 && edits % badEvery === 0) return reply("Say something.");
    const critique = tagged("critique", text) ?? "";
    const word = KEYWORDS.find((k) => critique.includes(k));
    return reply(word ? `${template} ${word}.` : template);
  };
  const client: ChatCompletionsClient = { chat: { completions: { create: async (body) => respond(body) } } };
  return { client, calls, respond };
}

/** The scripted chat behind a real HTTP endpoint (`/v1/chat/completions`), for the `openai` client. */
export async function serveScriptedChat(respond: (body: ChatCompletionBody) => unknown): Promise<{ url: string; close(): Promise<void> }> {
  const app = new Hono();
  // A Response is sent as it is (an error status); anything else as a 200 JSON answer.
  app.post("/v1/chat/completions", async (c) => {
    const answer = respond(await c.req.json());
    return answer instanceof Response ? answer : c.json(answer as object);
  });
  const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
    const s = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 }, () => resolve(s));
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

export interface QuestionTask {
  question: string;
}

export const tasks = (n: number, prefix: string): QuestionTask[] => Array.from({ length: n }, (_, i) => ({ question: `${prefix}${i}` }));

/** The reward a rendered prompt earns: half a point per keyword it contains. */
export const rewardOf = (prompt: string): number => KEYWORDS.filter((k) => prompt.includes(k)).length / KEYWORDS.length;

const otel = trace.getTracer("test.apo");

/**
 * Renders the template with the task, records the "LLM call" as a span with gen_ai attributes (so
 * TraceToMessages sees a conversation) and emits the reward of the rendered prompt.
 */
export const keywordAgent = promptRollout(async function keywords(task: QuestionTask, prompt_template: PromptTemplate) {
  const prompt = renderPromptTemplate(prompt_template, { question: task.question });
  otel.startActiveSpan("openai.chat.completion", (span) => {
    span.setAttributes(
      openAiCallAttributes({
        request: { model: "agent", messages: [{ role: "user", content: prompt }] },
        response: { choices: [{ index: 0, message: { role: "assistant", content: `answer to ${task.question}` } }] },
      }),
    );
    span.end();
  });
  emitReward(rewardOf(prompt));
});

/** An agent that always fails. */
export const failingAgent = promptRollout(async function failing(task: QuestionTask, prompt_template: PromptTemplate) {
  throw new Error(`agent down on ${task.question} (${prompt_template.engine})`);
});
