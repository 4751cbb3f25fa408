/**
 * The Calc-X agent in the OpenAI Agents SDK (`@openai/agents`): an `Agent` with the system prompt as its
 * instructions and the calculator as a function tool, run by a `Runner` for at most MAX_TURNS model
 * calls, on the Chat Completions model of an `OpenAIProvider` whose `baseURL` is the `main_llm`
 * resource's endpoint (`useResponses: false`: the policy server speaks Chat Completions). That base URL is
 * the only line that knows about training.
 *
 * Tools: the calculator's MCP tools, listed by the official MCP client, as function tools with the
 * server's JSON schema (`strict: false`; the SDK adds only that key). The SDK's own MCP support
 * (`mcpServers: [new MCPServerStdio(...)]`) works too, but it sends the schema with `$schema` and
 * `additionalProperties: true` added: 76 more prompt tokens of the Calc-X policy's 256, in a shape it was
 * not fine-tuned on.
 *
 * Tracing: the policy server records every model call with its token ids. The SDK's own tracing exports
 * to the OpenAI platform by default; the runner here turns it off (`tracingDisabled`), so nothing leaves
 * the machine and nothing is counted twice.
 */
import { Agent, MaxTurnsExceededError, OpenAIProvider, Runner, tool } from "@openai/agents";
import { llmRollout } from "../../src/runner/index.ts";
import type { LLM } from "../../src/types/index.ts";
import {
  type CalcXTask,
  calculatorServer,
  CONTEXT_FULL,
  CONTEXT_LENGTH_EXCEEDED,
  type FrameworkAgentOptions,
  type FrameworkAgentResult,
  MAX_TOKENS_PER_TURN,
  MAX_TURNS,
  MODEL_TIMEOUT_MS,
  scored,
  SYSTEM_PROMPT,
  temperatureOf,
  TOOL_TIMEOUT_MS,
  withMcpTools,
} from "./calc-x-task.ts";

/** The SDK's agent name (its spans' `agent.name`). */
export const AGENT_NAME = "calc-x";

/** The openai client's refusal of an over-long prompt (the SDK's own copy of `openai`, so by shape). */
const contextFull = (e: unknown): boolean =>
  (e as { status?: unknown; code?: unknown } | null)?.status === 400 && (e as { code?: unknown }).code === CONTEXT_LENGTH_EXCEEDED;

/** One Calc-X rollout with the OpenAI Agents SDK. */
export async function runOpenAIAgents(task: CalcXTask, llm: LLM, options: FrameworkAgentOptions = {}): Promise<FrameworkAgentResult> {
  const maxTurns = options.maxTurns ?? MAX_TURNS;
  const runner = new Runner({
    modelProvider: new OpenAIProvider({ baseURL: llm.endpoint, apiKey: llm.api_key ?? "none", useResponses: false }),
    model: llm.model,
    tracingDisabled: true,
  });
  return withMcpTools(options.tools ?? calculatorServer, options.toolTimeoutMs ?? TOOL_TIMEOUT_MS, async (mcp) => {
    const agent = new Agent({
      name: AGENT_NAME,
      instructions: SYSTEM_PROMPT,
      tools: mcp.map((t) =>
        tool({
          name: t.name,
          description: t.description,
          parameters: t.parameters as never,
          strict: false,
          execute: (args) => t.call(args as Record<string, unknown>),
        }),
      ),
      modelSettings: { maxTokens: options.maxTokens ?? MAX_TOKENS_PER_TURN, temperature: temperatureOf(llm) },
    });
    // the SDK bounds the whole run: each model call gets MODEL_TIMEOUT_MS of it, each tool call its own timeout
    const signal = AbortSignal.timeout(maxTurns * (options.modelTimeoutMs ?? MODEL_TIMEOUT_MS));
    try {
      if (options.stream) {
        const streamed = await runner.run(agent, task.question, { maxTurns, signal, stream: true });
        for await (const _event of streamed); // the events as they come; the result when they end
        await streamed.completed;
        if (streamed.error) throw streamed.error;
        return scored(task, streamed.finalOutput ?? "");
      }
      const result = await runner.run(agent, task.question, { maxTurns, signal });
      return scored(task, result.finalOutput ?? "");
    } catch (e) {
      // the turn limit reached with the last reply asking for tools: no answer
      if (e instanceof MaxTurnsExceededError) return scored(task, "");
      if (contextFull(e)) return CONTEXT_FULL;
      throw e;
    }
  });
}

/** The agent module `agl train --agent examples/frameworks/openai-agents.ts` imports. */
export default llmRollout(async function openAIAgentsCalcX(task: CalcXTask, llm: LLM) {
  return (await runOpenAIAgents(task, llm)).reward;
});
