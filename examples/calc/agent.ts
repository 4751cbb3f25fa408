/**
 * The calc agent, written against the official `openai` client and nothing else: it asks the policy
 * the question and returns 1 for a correct answer. It has no tracing code; the policy server records
 * each call (with its token ids) under the rollout's routing prefix, and the runner stores the
 * returned reward.
 */
import OpenAI from "openai";
import { llmRollout } from "../../src/runner/index.ts";
import type { LLM } from "../../src/types/index.ts";
import { reward, type CalcTask } from "./tasks.ts";

export const MAX_ANSWER_TOKENS = 6;

export async function solve(task: CalcTask, llm: LLM): Promise<{ reply: string; reward: number }> {
  const client = new OpenAI({ baseURL: llm.endpoint, apiKey: llm.api_key ?? "none", maxRetries: 0 });
  const res = await client.chat.completions.create({
    model: llm.model,
    messages: [{ role: "user", content: task.question }],
    max_tokens: MAX_ANSWER_TOKENS,
    temperature: (llm.sampling_parameters.temperature as number | undefined) ?? 0,
  });
  const reply = res.choices[0]?.message.content ?? "";
  return { reply, reward: reward(task, reply) };
}

export const calcAgent = llmRollout(async function calc(task: CalcTask, llm: LLM) {
  return (await solve(task, llm)).reward;
});

/** The agent module `agl train` imports (examples/calc/hf.ts). */
export default calcAgent;
