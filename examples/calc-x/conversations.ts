/**
 * The reference tool-using conversation of a Calc-X task, as the agent holds it (OpenAI messages): the
 * system prompt and question, one assistant message per calculator call with the exact result fed back as
 * a tool message, and the final `### ANSWER: <n> ###`. Rendered through the policy's chat template, these
 * are the SFT data, and the tokenizer's training text.
 */
import type { TemplateMessage, Tokenizer, ToolDefinition } from "../../src/model/index.ts";
import { referenceResults } from "./tasks.ts";
import type { CalcXTask } from "./types.ts";

/** The agent's system prompt (the contract's; the agent sends the same text). */
export const SYSTEM_PROMPT = "Use the calculator. End with ### ANSWER: <number> ###";

/** The calculator as the agent passes it to the model: the MCP tool mapped to an OpenAI function tool. */
export const CALCULATOR_TOOL: ToolDefinition = {
  type: "function",
  function: {
    name: "calculator",
    description: "Evaluate an arithmetic expression exactly.",
    parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] },
  },
};

export const TOOLS: readonly ToolDefinition[] = [CALCULATOR_TOOL];

/** The final reply the reward reads. */
export const answerText = (answer: string): string => `### ANSWER: ${answer} ###`;

/** The messages the model sees first. */
export function startMessages(task: Pick<CalcXTask, "question">): TemplateMessage[] {
  return [
    { role: "system", content: SYSTEM_PROMPT },
    { role: "user", content: task.question },
  ];
}

/** The whole reference conversation: calls, exact results, answer. */
export function referenceConversation(task: CalcXTask): TemplateMessage[] {
  const results = referenceResults(task);
  const messages = startMessages(task);
  task.expressions.forEach((expression, i) => {
    const id = `call_${i}`;
    messages.push(
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id, type: "function", function: { name: "calculator", arguments: JSON.stringify({ expression }) } }],
      },
      { role: "tool", tool_call_id: id, content: results[i]! },
    );
  });
  messages.push({ role: "assistant", content: answerText(task.answer) });
  return messages;
}

/** One assistant turn: the prompt ids before it (with the generation prompt) and the ids it writes. */
export interface Turn {
  prompt: number[];
  /** The assistant's tokens up to and including the end-of-turn token. */
  response: number[];
}

/**
 * The assistant turns of a conversation as the model meets them: turn k's prompt is the template's
 * rendering of the messages before it with the generation prompt; its response is what the full rendering
 * adds after that prompt, cut after the end-of-turn token. Throws when a rendering does not extend the
 * previous one token for token (the property multi-turn training relies on).
 */
export function assistantTurns(tokenizer: Tokenizer, messages: readonly TemplateMessage[], tools = TOOLS): Turn[] {
  const eos = tokenizer.eosTokenIds[0]!;
  const turns: Turn[] = [];
  messages.forEach((m, i) => {
    if (m.role !== "assistant") return;
    const prompt = tokenizer.applyChatTemplate(messages.slice(0, i), { tools, addGenerationPrompt: true });
    const full = tokenizer.applyChatTemplate(messages.slice(0, i + 1), { tools });
    const last = turns.at(-1);
    if (last && !startsWith(prompt, [...last.prompt, ...last.response]))
      throw new Error(`calc-x: turn ${turns.length}'s prompt does not extend turn ${turns.length - 1}'s prompt and response`);
    if (!startsWith(full, prompt)) throw new Error(`calc-x: the assistant message ${i} does not extend its prompt`);
    const end = full.indexOf(eos, prompt.length);
    if (end < 0) throw new Error(`calc-x: the assistant message ${i} has no end-of-turn token`);
    turns.push({ prompt, response: full.slice(prompt.length, end + 1) });
  });
  return turns;
}

function startsWith(xs: readonly number[], prefix: readonly number[]): boolean {
  return prefix.length <= xs.length && prefix.every((x, i) => xs[i] === x);
}

/**
 * One SFT row for a whole conversation: the first prompt, then everything after it with a mask that is 1
 * on the assistant's tokens (tool calls and answer) and 0 on the tool results and chat scaffolding.
 */
export function sftRow(
  tokenizer: Tokenizer,
  messages: readonly TemplateMessage[],
  tools = TOOLS,
): { prompt: number[]; response: number[]; mask: number[] } {
  const turns = assistantTurns(tokenizer, messages, tools);
  const first = turns[0]!;
  const last = turns.at(-1)!;
  const all = [...last.prompt, ...last.response];
  const mask = new Array<number>(all.length).fill(0);
  for (const t of turns) mask.fill(1, t.prompt.length, t.prompt.length + t.response.length);
  return { prompt: first.prompt, response: all.slice(first.prompt.length), mask: mask.slice(first.prompt.length) };
}
