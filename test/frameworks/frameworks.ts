/**
 * The framework agents under test (examples/frameworks/), with what each sends that differs from the
 * plain `openai` agent, and the scripted replies their tests play.
 */
import aiSdkAgent, { runAiSdk } from "../../examples/frameworks/ai-sdk.ts";
import type { CalcXTask, FrameworkAgentOptions, FrameworkAgentResult } from "../../examples/frameworks/calc-x-task.ts";
import langGraphAgent, { runLangGraph } from "../../examples/frameworks/langgraph.ts";
import openAIAgentsAgent, { runOpenAIAgents } from "../../examples/frameworks/openai-agents.ts";
import { TOOLS } from "../../examples/calc-x/conversations.ts";
import type { LitAgent } from "../../src/runner/index.ts";
import type { LLM } from "../../src/types/index.ts";
import { chatAnswer, chatChunk, type Step } from "../proxy/scripted-upstream.ts";

export interface Framework {
  name: string;
  /** The agent module's path, for `agl train --agent`. */
  module: string;
  agent: LitAgent<unknown>;
  run(task: CalcXTask, llm: LLM, options?: FrameworkAgentOptions): Promise<FrameworkAgentResult>;
  /** The `tools` of each request, as JSON text. */
  tools: string;
  /** What a tool call whose arguments are not JSON does: an error goes back to the model, or the rollout ends unanswered. */
  malformedCall: "answered" | "ends";
}

export const FRAMEWORKS: Framework[] = [
  {
    name: "Vercel AI SDK",
    module: "examples/frameworks/ai-sdk.ts",
    agent: aiSdkAgent as LitAgent<unknown>,
    run: runAiSdk,
    tools: JSON.stringify(TOOLS),
    malformedCall: "answered",
  },
  {
    name: "LangGraph.js",
    module: "examples/frameworks/langgraph.ts",
    agent: langGraphAgent as LitAgent<unknown>,
    run: runLangGraph,
    tools: JSON.stringify(TOOLS),
    // ChatOpenAI keeps such a call in `invalid_tool_calls`, so toolsCondition routes to the end
    malformedCall: "ends",
  },
  {
    name: "OpenAI Agents SDK",
    module: "examples/frameworks/openai-agents.ts",
    agent: openAIAgentsAgent as LitAgent<unknown>,
    run: runOpenAIAgents,
    // the SDK writes `strict` into every function tool
    tools: JSON.stringify(TOOLS.map((t) => ({ ...t, function: { ...t.function, strict: false } }))),
    malformedCall: "answered",
  },
];

let ids = 0;

/** A reply that calls the calculator (arguments as the raw text the model wrote). */
export const toolCallReply = (args: string) =>
  chatAnswer("", {
    id: `chatcmpl-${++ids}`,
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          content: null,
          tool_calls: [{ id: `call_${ids}`, type: "function", function: { name: "calculator", arguments: args } }],
        },
        finish_reason: "tool_calls",
      },
    ],
  });
export const calc = (expression: string) => toolCallReply(JSON.stringify({ expression }));
export const answer = (text: string) => chatAnswer(text, { id: `chatcmpl-${++ids}` });

/** A scripted reply as one upstream step: its JSON body, or the same reply as server-sent chunks with a usage chunk. */
export function step(reply: ReturnType<typeof chatAnswer>, stream: boolean): Step {
  if (!stream) return { kind: "json", body: reply };
  const { id, choices, usage } = reply as {
    id: string;
    choices: { message: Record<string, unknown>; finish_reason: string }[];
    usage: unknown;
  };
  const { message, finish_reason } = choices[0]!;
  const calls = (message.tool_calls as Record<string, unknown>[] | undefined)?.map((c, index) => ({ index, ...c }));
  return {
    kind: "sse",
    events: [
      chatChunk({ role: "assistant", content: message.content ?? "", ...(calls ? { tool_calls: calls } : {}) }, null, { id }),
      chatChunk({}, finish_reason, { id }),
      chatChunk({}, null, { id, choices: [], usage }),
    ],
  };
}

/** The policy server's answer to a prompt longer than the model's context. */
export const CONTEXT_FULL_STEP: Step = {
  kind: "json",
  status: 400,
  body: {
    error: { message: "maximum context length is 256 tokens", type: "invalid_request_error", param: null, code: "context_length_exceeded" },
  },
};
