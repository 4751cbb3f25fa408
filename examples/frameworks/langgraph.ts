/**
 * The Calc-X agent in LangGraph.js: a `StateGraph` over the chat messages with a model node (`agent`,
 * `ChatOpenAI` with the tools bound) and a tool node (`tools`, the prebuilt `ToolNode`); after each model
 * call `toolsCondition` routes to the tools when the reply has tool calls, else to the end. The model's
 * `configuration.baseURL` is the `main_llm` resource's endpoint: the only line that knows about training.
 *
 * The turn limit is part of the graph: after MAX_TURNS model calls the route goes to the end whatever
 * the reply (the last call's tool calls are not run, as in examples/calc-x/agent.ts), so no
 * `GraphRecursionError` ends a rollout. Streaming is `graph.stream(..., { streamMode: "messages" })`: the
 * model node then streams its call. (`ChatOpenAI({ streaming: true })` is avoided: its `invoke` estimates
 * token counts with tiktoken, whose tables it downloads.)
 *
 * Tools: the calculator's MCP tools, listed by the official MCP client and wrapped with `tool()` and the
 * server's JSON schema, which `bindTools` sends unchanged. (`@langchain/mcp-adapters` does the same
 * wrapping as a package of its own.)
 *
 * Tracing: the policy server records every model call with its token ids. LangChain's own tracing goes to
 * LangSmith, off unless its environment variables turn it on; nothing of it reaches the rollout.
 */
import { AIMessage, HumanMessage, SystemMessage } from "@langchain/core/messages";
import { ContextOverflowError } from "@langchain/core/errors";
import { tool } from "@langchain/core/tools";
import { END, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
import { ToolNode, toolsCondition } from "@langchain/langgraph/prebuilt";
import { ChatOpenAI } from "@langchain/openai";
import { llmRollout } from "../../src/runner/index.ts";
import type { LLM } from "../../src/types/index.ts";
import {
  type CalcXTask,
  calculatorServer,
  CONTEXT_FULL,
  type FrameworkAgentOptions,
  type FrameworkAgentResult,
  MAX_TOKENS_PER_TURN,
  MAX_TURNS,
  MODEL_TIMEOUT_MS,
  type McpTool,
  scored,
  SYSTEM_PROMPT,
  temperatureOf,
  TOOL_TIMEOUT_MS,
  withMcpTools,
} from "./calc-x-task.ts";

/** The graph: `agent` (the model) and `tools` (the tool node), the model called at most `maxTurns` times. */
export function calcXGraph(llm: LLM, mcp: McpTool[], options: FrameworkAgentOptions = {}) {
  const tools = mcp.map((t) =>
    tool((args: Record<string, unknown>) => t.call(args), { name: t.name, description: t.description, schema: t.parameters }),
  );
  const model = new ChatOpenAI({
    model: llm.model,
    apiKey: llm.api_key ?? "none",
    configuration: { baseURL: llm.endpoint },
    maxTokens: options.maxTokens ?? MAX_TOKENS_PER_TURN,
    temperature: temperatureOf(llm),
    timeout: options.modelTimeoutMs ?? MODEL_TIMEOUT_MS,
    maxRetries: 0,
  }).bindTools(tools);
  const maxTurns = options.maxTurns ?? MAX_TURNS;
  const route = (state: typeof MessagesAnnotation.State) =>
    state.messages.filter((m) => AIMessage.isInstance(m)).length >= maxTurns ? END : toolsCondition(state);
  return new StateGraph(MessagesAnnotation)
    .addNode("agent", async (state) => ({ messages: [await model.invoke(state.messages)] }))
    .addNode("tools", new ToolNode(tools))
    .addEdge(START, "agent")
    .addConditionalEdges("agent", route, ["tools", END])
    .addEdge("tools", "agent")
    .compile();
}

/** One Calc-X rollout with LangGraph. */
export async function runLangGraph(task: CalcXTask, llm: LLM, options: FrameworkAgentOptions = {}): Promise<FrameworkAgentResult> {
  return withMcpTools(options.tools ?? calculatorServer, options.toolTimeoutMs ?? TOOL_TIMEOUT_MS, async (mcp) => {
    const graph = calcXGraph(llm, mcp, options);
    const input = { messages: [new SystemMessage(SYSTEM_PROMPT), new HumanMessage(task.question)] };
    let final: typeof MessagesAnnotation.State;
    try {
      if (options.stream) {
        // "values" gives the state after each step (the last is the final one), "messages" the model's tokens
        let last: typeof MessagesAnnotation.State | undefined;
        for await (const [mode, chunk] of await graph.stream(input, { streamMode: ["messages", "values"] }))
          if (mode === "values") last = chunk as typeof MessagesAnnotation.State;
        final = last!;
      } else final = await graph.invoke(input);
    } catch (e) {
      if (e instanceof ContextOverflowError) return CONTEXT_FULL;
      throw e;
    }
    const reply = final.messages.at(-1);
    return scored(task, AIMessage.isInstance(reply) ? reply.text : "");
  });
}

/** The agent module `agl train --agent examples/frameworks/langgraph.ts` imports. */
export default llmRollout(async function langGraphCalcX(task: CalcXTask, llm: LLM) {
  return (await runLangGraph(task, llm)).reward;
});
