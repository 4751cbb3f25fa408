/**
 * The Calc-X agent in the Vercel AI SDK (`ai`): `generateText` (or `streamText`) with the calculator as a
 * tool and multi-step calls (`stopWhen: stepCountIs(MAX_TURNS)`), on an OpenAI-compatible provider whose
 * base URL is the `main_llm` resource's endpoint. The only line that knows about training is that base URL.
 *
 * Tools: the calculator's MCP tools, listed by the official MCP client and handed to the SDK as
 * `dynamicTool`s with the server's JSON schema (`jsonSchema`), so the model sees the definition it was
 * fine-tuned on. (The SDK's own MCP client lives in `@ai-sdk/mcp`, a package of its own; the official
 * client is already here and shares one calculator process between rollouts.)
 *
 * Tracing: the policy server records every model call with its token ids; the SDK's own OpenTelemetry
 * spans (`experimental_telemetry`) reach the rollout too (ai.generateText, one ai.generateText.doGenerate
 * per model call, ai.toolCall per tool call) and show the agent's steps in the dashboard. They carry no
 * token ids and no `gen_ai.operation.name`, so neither triplet adapter counts them as LLM calls: each
 * model call is one triplet, the policy server's.
 *
 *   npx agl train --model examples/calc-x/model --agent examples/frameworks/ai-sdk.ts --data tasks.jsonl ...
 */
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { APICallError, dynamicTool, generateText, jsonSchema, stepCountIs, streamText, type ToolSet } from "ai";
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

/** The telemetry function id: the SDK's spans are named `ai.generateText` etc. with `operation.name` "<span> calc-x". */
export const FUNCTION_ID = "calc-x";

const contextFull = (e: unknown): boolean =>
  APICallError.isInstance(e) &&
  e.statusCode === 400 &&
  (e.data as { error?: { code?: unknown } } | undefined)?.error?.code === CONTEXT_LENGTH_EXCEEDED;

/** One Calc-X rollout with the AI SDK. */
export async function runAiSdk(task: CalcXTask, llm: LLM, options: FrameworkAgentOptions = {}): Promise<FrameworkAgentResult> {
  const policy = createOpenAICompatible({ name: "policy", baseURL: llm.endpoint, apiKey: llm.api_key ?? "none" });
  return withMcpTools(options.tools ?? calculatorServer, options.toolTimeoutMs ?? TOOL_TIMEOUT_MS, async (mcp) => {
    const tools: ToolSet = Object.fromEntries(
      mcp.map((t) => [
        t.name,
        dynamicTool({
          description: t.description,
          inputSchema: jsonSchema(t.parameters),
          execute: (args) => t.call(args as Record<string, unknown>),
        }),
      ]),
    );
    const call = {
      model: policy.chatModel(llm.model),
      system: SYSTEM_PROMPT,
      prompt: task.question,
      tools,
      stopWhen: stepCountIs(options.maxTurns ?? MAX_TURNS),
      maxOutputTokens: options.maxTokens ?? MAX_TOKENS_PER_TURN,
      temperature: temperatureOf(llm),
      maxRetries: 0,
      timeout: { stepMs: options.modelTimeoutMs ?? MODEL_TIMEOUT_MS },
      experimental_telemetry: { isEnabled: true, functionId: FUNCTION_ID },
    };
    // A stream reports its error to onError and ends (rejecting with NoOutputGeneratedError when no step
    // finished): its first error is the rollout's.
    let streamError: unknown;
    const streamed = async (): Promise<string> => {
      const text = await Promise.resolve(streamText({ ...call, onError: ({ error }) => void (streamError ??= error) }).text).catch(
        (e: unknown) => Promise.reject(streamError ?? e),
      );
      if (streamError !== undefined) throw streamError;
      return text;
    };
    try {
      // the last step's text: empty when the turn limit cut the conversation at a tool call
      const text = options.stream ? await streamed() : (await generateText(call)).text;
      return scored(task, text);
    } catch (e) {
      if (contextFull(e)) return CONTEXT_FULL;
      throw e;
    }
  });
}

/** The agent module `agl train --agent examples/frameworks/ai-sdk.ts` imports. */
export default llmRollout(async function aiSdkCalcX(task: CalcXTask, llm: LLM) {
  return (await runAiSdk(task, llm)).reward;
});
