/**
 * The calc agent, written against the official `openai` client and nothing else: it asks the policy
 * the question and returns 1 for a correct answer. It has no tracing code; the policy server records
 * each call (with its token ids) under the rollout's routing prefix, and the runner stores the
 * returned reward. `calcAgentWith(fetch)` is the same agent whose client sends its requests through
 * `fetch`: an in-process policy server's, in a browser tab (examples/tab/).
 */
import OpenAI from "openai";
import { llmRollout } from "../../src/runner/index.ts";
import type { LLM } from "../../src/types/index.ts";
import { reward, type CalcTask } from "./tasks.ts";

export const MAX_ANSWER_TOKENS = 6;

export async function solve(task: CalcTask, llm: LLM, transport?: typeof fetch): Promise<{ reply: string; reward: number }> {
  const client = new OpenAI({
    baseURL: llm.endpoint,
    apiKey: llm.api_key ?? "none",
    maxRetries: 0,
    // a page's own transport: no key of the user's to leak, so the client may run in a browser
    ...(transport ? { fetch: transport, dangerouslyAllowBrowser: true } : {}),
  });
  const res = await client.chat.completions.create({
    model: llm.model,
    messages: [{ role: "user", content: task.question }],
    max_tokens: MAX_ANSWER_TOKENS,
    temperature: (llm.sampling_parameters.temperature as number | undefined) ?? 0,
  });
  const reply = res.choices[0]?.message.content ?? "";
  return { reply, reward: reward(task, reply) };
}

/** The calc agent with its client's requests sent through `transport` (the global fetch when left out). */
export function calcAgentWith(transport?: typeof fetch) {
  return llmRollout(async function calc(task: CalcTask, llm: LLM) {
    return (await solve(task, llm, transport)).reward;
  });
}

export const calcAgent = calcAgentWith();

/** The agent module `agl train` imports (examples/calc/hf.ts). */
export default calcAgent;
