/**
 * The Calc-X agent on Node: the agent of agent-loop.ts (the `openai` client, MCP tools, the reward; see
 * there) with the calculator MCP server over stdio, a child process every rollout of this process shares.
 * `agl train --agent examples/calc-x/agent.ts` imports its default export.
 */
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";
import type { LLM } from "../../src/types/index.ts";
import { type CalcXOptions, type CalcXResult, calcXAgentWith, runCalcX as runWithTools } from "./agent-loop.ts";
import { StdioToolServer, type ToolServer } from "./mcp.ts";
import type { CalcXTask } from "./types.ts";

export {
  type CalcXOptions,
  type CalcXResult,
  calcXAgentWith,
  type ListedTool,
  listTools,
  MAX_TOKENS_PER_TURN,
  MAX_TURNS,
  MODEL_TIMEOUT_MS,
  reward,
  ROW_LIMITS,
  runTool,
  STATS,
  SYSTEM_PROMPT,
  TOOL_TIMEOUT_MS,
} from "./agent-loop.ts";

/**
 * The calculator server over stdio, one child per process shared by its rollouts: this Node with the
 * tsx loader runs examples/calc-x/calculator-server.ts (as `npx tsx` would, without npx's own start).
 */
export const calculatorServer = new StdioToolServer("calculator", {
  command: process.execPath,
  args: [
    "--import",
    pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href,
    fileURLToPath(new URL("./calculator-server.ts", import.meta.url)),
  ],
});

/** One Calc-X rollout (agent-loop.ts), its tools from `calculatorServer` unless `options.tools` says otherwise. */
export function runCalcX(
  task: CalcXTask,
  llm: LLM,
  options: Omit<CalcXOptions, "tools"> & { tools?: ToolServer } = {},
): Promise<CalcXResult> {
  return runWithTools(task, llm, { ...options, tools: options.tools ?? calculatorServer });
}

export const calcXAgent = calcXAgentWith({ tools: calculatorServer });

/** The agent module `agl train --agent examples/calc-x/agent.ts` imports. */
export default calcXAgent;
