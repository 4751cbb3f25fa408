/**
 * The Calc-X agent, written as a user writes one: the official `openai` client pointed at the
 * `main_llm` resource, and an MCP client to the calculator server. It lists the server's tools, offers
 * them to the model as OpenAI function tools, runs each `tool_calls` entry through MCP, appends the
 * results as `tool` messages and calls the model again, until a reply has no tool calls or MAX_TURNS
 * model calls are spent. Reward: 1 when the last reply says `### ANSWER: <n> ###` with the task's
 * number, else 0. It traces no model call itself: the policy server records each one.
 *
 * A malformed tool call (arguments not JSON, not matching the tool's schema, an unknown tool) goes back
 * to the model as a tool message `error: <reason>` and the rollout goes on. A failing MCP server (dead,
 * hung past TOOL_TIMEOUT_MS, unable to start) fails the rollout with a `McpServerError` naming it, and
 * the runner's retry policy applies. Every model call has a timeout too, so a rollout never hangs.
 *
 * Inside a rollout each tool call is an `agentlightning.operation` span named `tool.<name>` (its
 * arguments in, its result out), and the rollout ends with an annotation `calc_x` holding its turns,
 * tool calls and well-formed tool calls: the dashboard shows them beside the model calls the policy
 * server recorded, and the demo's statistics read them from the store.
 *
 * This file is runtime-neutral (a browser tab runs it, with the calculator in memory: examples/tab/);
 * agent.ts gives it the calculator server over stdio for Node.
 */
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import OpenAI from "openai";
import type { ChatCompletionMessageParam, ChatCompletionMessageToolCall, ChatCompletionTool } from "openai/resources/chat/completions";
import { z } from "zod";
import { llmRollout } from "../../src/runner/index.ts";
import { context, type Context } from "@opentelemetry/api";
import { emitAnnotation, getActiveTracer, operation } from "../../src/tracer/index.ts";
import type { LLM } from "../../src/types/index.ts";
import { CalculatorError, evaluate } from "./calculator.ts";
import { McpServerError, type ToolServer } from "./tool-server.ts";
import { SYSTEM_PROMPT } from "./conversations.ts";
import type { CalcXTask } from "./types.ts";

/** The instruction the policy was fine-tuned with (conversations.ts). */
export { SYSTEM_PROMPT };
/** Model calls per rollout at most. */
export const MAX_TURNS = 4;
export const MAX_TOKENS_PER_TURN = 48;
export const MODEL_TIMEOUT_MS = 60_000;
export const TOOL_TIMEOUT_MS = 10_000;
/**
 * Row lengths within the model's 256 positions. A trajectory row is the first prompt (system, tools,
 * question: at most 110 tokens) and every turn after it; a transition row is one call, whose prompt holds
 * the turns before it (up to 208 tokens) and whose reply is at most MAX_TOKENS_PER_TURN (48).
 */
export const ROW_LIMITS = {
  trajectory: { maxPrompt: 110, maxResponse: 146 },
  transition: { maxPrompt: 208, maxResponse: 48 },
} as const;

const ANSWER = /### ANSWER: (-?[\d.]+) ###/;

export interface CalcXOptions {
  /** Where the tools come from: the calculator MCP server (over stdio in agent.ts, in memory in a tab). */
  tools: ToolServer;
  /** The `openai` client's transport (an in-process policy server's `fetch` in a tab) [the global fetch]. */
  fetch?: typeof fetch;
  maxTurns?: number;
  maxTokens?: number;
  modelTimeoutMs?: number;
  toolTimeoutMs?: number;
}

export interface CalcXResult {
  reward: number;
  /** Model calls made. */
  turns: number;
  /** `tool_calls` entries the agent answered (those of a reply on the last allowed turn are not). */
  toolCalls: number;
  /** Those well formed (known tool, arguments matching its schema), which MCP ran. */
  parsedToolCalls: number;
  /** The conversation outgrew the model's context (the server refused the next turn): it ends there, reward 0. */
  contextFull: boolean;
  /** Every message of the conversation, the last reply included. */
  transcript: ChatCompletionMessageParam[];
}

/** 1 when `reply` ends the conversation with the task's answer (compared as exact numbers), else 0. */
export function reward(task: CalcXTask, reply: string): number {
  const said = ANSWER.exec(reply)?.[1];
  if (said === undefined) return 0;
  try {
    return evaluate(said) === evaluate(task.answer) ? 1 : 0;
  } catch (e) {
    if (e instanceof CalculatorError) return 0; // "1.2.3" is no number
    throw e;
  }
}

export interface ListedTool {
  openai: ChatCompletionTool;
  validate: z.ZodType;
}

/** The server's tools as OpenAI function tools, with a validator for their arguments. */
export async function listTools(client: Client): Promise<Map<string, ListedTool>> {
  const { tools } = await client.listTools();
  return new Map(
    tools.map((t) => {
      const { $schema: _, ...parameters } = t.inputSchema as Record<string, unknown>;
      const openai: ChatCompletionTool = {
        type: "function",
        function: { name: t.name, description: t.description, parameters },
      };
      return [t.name, { openai, validate: z.fromJSONSchema(parameters as never) }];
    }),
  );
}

/** The arguments of `call` when well formed, else the reason for the model. */
function parseCall(
  call: ChatCompletionMessageToolCall,
  tools: Map<string, ListedTool>,
): { name: string; args: Record<string, unknown> } | { error: string } {
  if (call.type !== "function") return { error: `unsupported tool call type '${call.type}'` };
  const tool = tools.get(call.function.name);
  if (tool === undefined) return { error: `unknown tool '${call.function.name}'` };
  let args: unknown;
  try {
    args = JSON.parse(call.function.arguments || "{}");
  } catch {
    return { error: "arguments are not JSON" };
  }
  const checked = tool.validate.safeParse(args);
  if (!checked.success) {
    const issue = checked.error.issues[0]!;
    return { error: issue.path.length > 0 ? `${issue.path.join(".")}: ${issue.message}` : issue.message };
  }
  return { name: call.function.name, args: checked.data as Record<string, unknown> };
}

/** Runs one tool call through MCP; a tool error comes back as text, a failing server throws. */
export async function runTool(
  client: Client,
  server: string,
  name: string,
  args: Record<string, unknown>,
  timeoutMs: number,
): Promise<string> {
  let result: Awaited<ReturnType<Client["callTool"]>>;
  try {
    result = await client.callTool({ name, arguments: args }, undefined, { timeout: timeoutMs });
  } catch (e) {
    throw new McpServerError(server, `tool '${name}': ${(e as Error).message}`, { cause: e });
  }
  const content = (result.content ?? []) as { type: string; text?: string }[];
  const text = content.map((c) => (c.type === "text" ? (c.text ?? "") : `[${c.type}]`)).join("\n");
  return result.isError && !text.startsWith("error:") ? `error: ${text}` : text;
}

/**
 * The OpenTelemetry context of the rollout being traced (null outside one), read while the runner's call
 * to the agent is still on the stack: on Node it follows every `await` anyway, in a browser it does not,
 * so the agent hands it to its spans itself (docs/browser.md#tracing-without-async-context).
 */
function rolloutContext(): Context | null {
  return getActiveTracer()?.traceContextValue() ?? null;
}

const inContext = <T>(ctx: Context | null, fn: () => T): T => (ctx === null ? fn() : context.with(ctx, fn));

/** One Calc-X rollout: the conversation, its tool calls, its reward. */
export async function runCalcX(task: CalcXTask, llm: LLM, options: CalcXOptions): Promise<CalcXResult> {
  // first, while the runner's call is on the stack: the rollout's context, which a browser loses at the first `await`
  const trace = rolloutContext();
  const server = options.tools;
  const maxTurns = options.maxTurns ?? MAX_TURNS;
  const openai = new OpenAI({
    baseURL: llm.endpoint,
    apiKey: llm.api_key ?? "none",
    maxRetries: 0,
    timeout: options.modelTimeoutMs ?? MODEL_TIMEOUT_MS,
    // a page's own transport: no key of the user's to leak, so the client may run in a browser
    ...(options.fetch ? { fetch: options.fetch, dangerouslyAllowBrowser: true } : {}),
  });
  const client = await server.open();
  let broken = false;
  try {
    let tools: Map<string, ListedTool>;
    try {
      tools = await listTools(client);
    } catch (e) {
      throw new McpServerError(server.name, `listing tools: ${(e as Error).message}`, { cause: e });
    }
    const messages: ChatCompletionMessageParam[] = [
      { role: "system", content: SYSTEM_PROMPT },
      { role: "user", content: task.question },
    ];
    const result: CalcXResult = { reward: 0, turns: 0, toolCalls: 0, parsedToolCalls: 0, contextFull: false, transcript: messages };
    while (result.turns < maxTurns) {
      let res: OpenAI.ChatCompletion;
      try {
        res = await openai.chat.completions.create({
          model: llm.model,
          messages,
          tools: [...tools.values()].map((t) => t.openai),
          max_tokens: options.maxTokens ?? MAX_TOKENS_PER_TURN,
          temperature: (llm.sampling_parameters.temperature as number | undefined) ?? 0,
        });
      } catch (e) {
        // A small model's context fills up after a few tool results: that ends the conversation unanswered,
        // as running out of turns does, rather than failing the rollout.
        if (e instanceof OpenAI.BadRequestError && e.code === "context_length_exceeded") {
          result.contextFull = true;
          break;
        }
        throw e;
      }
      result.turns++;
      const reply = res.choices[0]?.message;
      const calls = reply?.tool_calls ?? [];
      messages.push({ role: "assistant", content: reply?.content ?? "", ...(calls.length > 0 ? { tool_calls: calls } : {}) });
      // The last allowed turn's calls would be read by no one.
      if (calls.length === 0 || result.turns === maxTurns) {
        result.reward = reward(task, reply?.content ?? "");
        break;
      }
      for (const call of calls) {
        result.toolCalls++;
        const parsed = parseCall(call, tools);
        let content: string;
        if ("error" in parsed) content = `error: ${parsed.error}`;
        else {
          result.parsedToolCalls++;
          const { name, args } = parsed;
          // traced into the rollout when there is one (a test may call runCalcX outside any)
          content = await inContext(trace, () =>
            operation({ name: `tool.${name}`, propagate: trace !== null }, async (op) => {
              op.setNamedInput(args);
              const text = await runTool(client, server.name, name, args, options.toolTimeoutMs ?? TOOL_TIMEOUT_MS);
              op.setOutput(text);
              return text;
            }),
          );
        }
        messages.push({ role: "tool", tool_call_id: call.id, content });
      }
    }
    return result;
  } catch (e) {
    broken = e instanceof McpServerError;
    throw e;
  } finally {
    await server.done(client, broken);
  }
}

/** Attribute keys of the rollout's `calc_x` annotation. */
export const STATS = {
  turns: "calc_x.turns",
  toolCalls: "calc_x.tool_calls",
  parsedToolCalls: "calc_x.parsed_tool_calls",
  contextFull: "calc_x.context_full",
} as const;

/** The Calc-X agent with its tools from `options.tools` (and its model calls through `options.fetch`). */
export function calcXAgentWith(options: CalcXOptions) {
  return llmRollout(async function calcX(task: CalcXTask, llm: LLM) {
    const trace = rolloutContext();
    const r = await runCalcX(task, llm, options);
    inContext(trace, () =>
      emitAnnotation(
        { calc_x: { turns: r.turns, tool_calls: r.toolCalls, parsed_tool_calls: r.parsedToolCalls, context_full: r.contextFull } },
        { propagate: trace !== null },
      ),
    );
    return r.reward;
  });
}
