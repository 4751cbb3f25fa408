/**
 * The task every framework agent here solves: Calc-X as examples/calc-x/agent.ts defines it (the system
 * prompt, the calculator's tools listed from its MCP server, the turn and token limits, the reward), so
 * each agent file holds only its framework's own code.
 *
 * The tools come from the MCP server through the official SDK's client (`withMcpTools`), one shared
 * stdio child per process as agent.ts has it. Each framework gets them as its own tool type, with the
 * server's JSON schema unchanged, so every framework sends the model the tool definition the policy was
 * fine-tuned on. A tool error (bad expression, arguments the server refuses) is text for the model; a
 * failing server (dead, hung) fails the rollout even when the framework turned the error into a tool
 * message and went on.
 */
import {
  calculatorServer,
  listTools,
  MAX_TOKENS_PER_TURN,
  MAX_TURNS,
  MODEL_TIMEOUT_MS,
  reward,
  runTool,
  SYSTEM_PROMPT,
  TOOL_TIMEOUT_MS,
} from "../calc-x/agent.ts";
import type { ChatCompletionFunctionTool } from "openai/resources/chat/completions";
import { McpServerError, type ToolServer } from "../calc-x/mcp.ts";
import type { CalcXTask } from "../calc-x/types.ts";
import type { LLM } from "../../src/types/index.ts";

export { MAX_TOKENS_PER_TURN, MAX_TURNS, MODEL_TIMEOUT_MS, reward, SYSTEM_PROMPT, TOOL_TIMEOUT_MS };
export type { CalcXTask };

export interface FrameworkAgentOptions {
  /** Where the tools come from (default: the calculator over stdio, one child per process). */
  tools?: ToolServer;
  /** Stream each model call (streamText, graph.stream, run(..., { stream: true })) [false]. */
  stream?: boolean;
  /** Model calls per rollout at most [MAX_TURNS]. */
  maxTurns?: number;
  maxTokens?: number;
  modelTimeoutMs?: number;
  toolTimeoutMs?: number;
}

export interface FrameworkAgentResult {
  reward: number;
  /** The last reply's text ("" when the rollout ended without one). */
  reply: string;
  /** The conversation outgrew the model's context (the server refused the next call): reward 0. */
  contextFull: boolean;
}

/** One MCP tool as a framework takes it: its name, description, JSON schema, and a call that returns the result text. */
export interface McpTool {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
  call(args: Record<string, unknown>): Promise<string>;
}

/** The sampling temperature the trainer asks for (0 when it sets none), as agent.ts reads it. */
export const temperatureOf = (llm: LLM): number => (llm.sampling_parameters.temperature as number | undefined) ?? 0;

/**
 * Runs `fn` with the tools of an MCP client from `server` (opened for this rollout, handed back after).
 * A server failure seen by any tool call fails the rollout with its `McpServerError`, whatever the
 * framework did with it, and the client is dropped so the next rollout gets a fresh server.
 */
export async function withMcpTools<T>(server: ToolServer, toolTimeoutMs: number, fn: (tools: McpTool[]) => Promise<T>): Promise<T> {
  const client = await server.open();
  let failure: McpServerError | null = null;
  let broken = false;
  try {
    let listed: Awaited<ReturnType<typeof listTools>>;
    try {
      listed = await listTools(client);
    } catch (e) {
      throw new McpServerError(server.name, `listing tools: ${(e as Error).message}`, { cause: e });
    }
    // listTools maps each MCP tool to an OpenAI function tool
    const tools = [...listed.values()]
      .map(({ openai }) => (openai as ChatCompletionFunctionTool).function)
      .map((f) => ({
        name: f.name,
        description: f.description ?? "",
        parameters: f.parameters as Record<string, unknown>,
        call: async (args: Record<string, unknown>) => {
          try {
            return await runTool(client, server.name, f.name, args, toolTimeoutMs);
          } catch (e) {
            if (e instanceof McpServerError) failure ??= e;
            throw e;
          }
        },
      }));
    const result = await fn(tools);
    if (failure !== null) throw failure;
    return result;
  } catch (e) {
    const error = failure ?? e;
    broken = error instanceof McpServerError;
    throw error;
  } finally {
    await server.done(client, broken);
  }
}

/** Builds a rollout function's result from the last reply. */
export const scored = (task: CalcXTask, reply: string): FrameworkAgentResult => ({
  reward: reward(task, reply),
  reply,
  contextFull: false,
});

/** The result of a rollout whose conversation outgrew the model's context: it ends there, unanswered. */
export const CONTEXT_FULL: FrameworkAgentResult = { reward: 0, reply: "", contextFull: true };

/** The policy server's refusal of a prompt longer than the model's context (OpenAI's error code). */
export const CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded";

export { calculatorServer };
