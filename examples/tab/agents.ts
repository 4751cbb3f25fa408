/**
 * What the tab can train: an agent, the model it starts from, its tasks, and how its rollouts become
 * training rows. `calc` is the calc demo (one model call, the byte-tokenizer checkpoint); `calc-x` is the
 * Calc-X tool agent (examples/calc-x/: up to four model calls with the calculator's MCP tool in between, an
 * HF-format Qwen2 with its tokenizer), its calculator MCP server in this realm over the SDK's in-memory
 * transport, its rollouts trained whole (trajectory rows, the tool results masked out). Runtime-neutral:
 * the page's worker and Node both build these.
 */
import { decodeModel, type LitAgent, loadPretrained, type ModelConfig, type ModelPolicy } from "../../src/browser.ts";
import { calcAgentWith, MAX_ANSWER_TOKENS } from "../calc/agent.ts";
import { type CalcTask, heldOutTasks as calcHeldOut, trainTasks as calcTrain } from "../calc/tasks.ts";
import { calcXAgentWith, ROW_LIMITS, SYSTEM_PROMPT } from "../calc-x/agent-loop.ts";
import { createCalculatorServer } from "../calc-x/calculator.ts";
import { TOOLS } from "../calc-x/conversations.ts";
import { heldOutTasks as calcXHeldOut, trainTasks as calcXTrain } from "../calc-x/tasks.ts";
import { InProcessToolServer } from "../calc-x/tool-server.ts";
import type { CalcXTask } from "../calc-x/types.ts";
import type { TabAgentName } from "./messages.ts";

/** The model a run starts from: our layout's weights (flat, or by name) and its tokenizer (the byte tokenizer when left out). */
export interface TabModel {
  name: string;
  config: ModelConfig;
  params: Float32Array | Record<string, Float32Array>;
  tokenizer?: ModelPolicy["tokenizer"];
}

export interface TabAgent<T = unknown> {
  name: TabAgentName;
  model: TabModel;
  /** The agent, its model calls sent through `transport` (the in-process policy server's `fetch`). */
  agent(transport: typeof fetch): LitAgent<T>;
  /** The held-out tasks (the first `valTasks`) and training tasks (none of them held out). */
  tasks(valTasks: number, seed: number): { train: T[]; heldOut: T[] };
  /** What becomes a training row: each model call, or each rollout's chain of calls. */
  level: "transition" | "trajectory";
  maxPromptLength: number;
  maxResponseLength: number;
  /** Sampling temperature of training rollouts (validation is greedy). */
  temperature: number;
  /** The token ids of the agent's first model-call prompt on `task` (the probe's input). */
  firstPrompt(task: T, tokenizer: ModelPolicy["tokenizer"]): number[];
}

/** The calc demo on its checkpoint (`model.safetensors` bytes, our format). */
export function calcTabAgent(checkpoint: Uint8Array): TabAgent<CalcTask> {
  const { config, params } = decodeModel(checkpoint);
  return {
    name: "calc",
    model: { name: "calc-policy", config, params },
    agent: (transport) => calcAgentWith(transport),
    tasks: (valTasks, seed) => {
      const heldOut = calcHeldOut(valTasks);
      return { heldOut, train: calcTrain(4096, seed + 17, heldOut) };
    },
    level: "transition",
    maxPromptLength: config.max_seq_len - MAX_ANSWER_TOKENS,
    maxResponseLength: MAX_ANSWER_TOKENS,
    temperature: 1,
    firstPrompt: (task, tokenizer) =>
      tokenizer.applyChatTemplate([{ role: "user", content: task.question }], { addGenerationPrompt: true }),
  };
}

/** The files of the Calc-X model folder, loaded by `loadPretrained`. */
export const CALC_X_FILES = [
  "config.json",
  "generation_config.json",
  "model.safetensors",
  "tokenizer.json",
  "tokenizer_config.json",
] as const;

/**
 * The Calc-X agent on the model of the folder at `folderUrl` (CALC_X_FILES, fetched), or of those files'
 * bytes; the calculator MCP server runs in this realm, one per rollout, linked to the agent in memory.
 */
export async function calcXTabAgent(folder: string | Record<string, Uint8Array>): Promise<TabAgent<CalcXTask>> {
  const source =
    typeof folder === "string"
      ? Object.fromEntries(CALC_X_FILES.map((f) => [f, new URL(f, folder.endsWith("/") ? folder : `${folder}/`).href]))
      : folder;
  const model = await loadPretrained(source, { name: "calc-x" });
  if (model.tokenizer === null) throw new Error("the Calc-X model folder has no tokenizer.json");
  const tools = new InProcessToolServer("calculator", createCalculatorServer);
  return {
    name: "calc-x",
    model: { name: model.name, config: model.config, params: model.weights, tokenizer: model.tokenizer },
    agent: (transport) => calcXAgentWith({ tools, fetch: transport }),
    tasks: (valTasks, seed) => ({ heldOut: calcXHeldOut(valTasks), train: calcXTrain(4096, seed + 17) }),
    level: "trajectory",
    maxPromptLength: ROW_LIMITS.trajectory.maxPrompt,
    maxResponseLength: ROW_LIMITS.trajectory.maxResponse,
    temperature: 0.7,
    firstPrompt: (task, tokenizer) =>
      tokenizer.applyChatTemplate(
        [
          { role: "system", content: SYSTEM_PROMPT },
          { role: "user", content: task.question },
        ],
        { addGenerationPrompt: true, tools: TOOLS },
      ),
  };
}
