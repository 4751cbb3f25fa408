/**
 * The Calc-X demo: GRPO trains the committed tool-calling policy (examples/calc-x/model, a Qwen2 made by
 * sft.ts) as the multi-turn MCP calculator agent (agent.ts) with `agl train`: LoRA on the CPU engine,
 * every rollout's chain of calls one training row (`--trace-aggregator-level trajectory`, the tool results
 * masked out) or each call its own row (`--level transition`). Prints held-out accuracy before and after
 * (greedy, the same held-out problems), tool calls and turns per rollout and the share of rollouts whose
 * tool calls all parsed, each read back from the store the run wrote (OUT/run/store.db; the dashboard
 * shows its rollouts turn by turn), and writes the reward curve (OUT/run/reward-curve.svg).
 *
 *   npm run demo:calc-x                      # = npx tsx examples/calc-x/train.ts
 *   npx tsx examples/calc-x/train.ts --level transition --steps 100 --out runs/calc-x-transition
 */
import { mkdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { runCli } from "../../src/cli/agl.ts";
import { runScript, type ScriptCommand } from "../../src/cli/script-options.ts";
import { findFinalReward } from "../../src/adapter/reward.ts";
import { openStore } from "../../src/store/index.ts";
import type { LightningStore } from "../../src/store/base.ts";
import { AGL_ANNOTATION } from "../../src/types/semconv.ts";
import { ROW_LIMITS, STATS } from "./agent.ts";

export { ROW_LIMITS };
import { heldOutTasks, trainTasks } from "./tasks.ts";
import type { CalcXTask } from "./types.ts";

export interface CalcXTrainOptions {
  steps: number;
  /** Tasks per step, and rollouts per task (the GRPO group). */
  batch: number;
  group: number;
  lr: number;
  /** Over the last `decayShare` of the steps the learning rate decays linearly to `lrFinal` x lr. */
  decayShare: number;
  lrFinal: number;
  temperature: number;
  loraR: number;
  loraAlpha: number;
  /** Train every weight instead of a LoRA adapter [false]. */
  fullFinetune: boolean;
  level: "trajectory" | "transition";
  valEvery: number;
  valTasks: number;
  runners: number;
  seed: number;
  out: string;
  device: "cpu" | "webgpu" | "auto";
  /** Training problems [4096 drawn from seed + 17, none held out]. */
  trainSet?: readonly CalcXTask[];
}

export const CALC_X_DEFAULTS: CalcXTrainOptions = {
  steps: 100,
  batch: 16,
  group: 8,
  lr: 5e-4,
  decayShare: 0.5,
  lrFinal: 0.1,
  temperature: 0.7,
  loraR: 16,
  loraAlpha: 32,
  fullFinetune: false,
  level: "trajectory",
  valEvery: 25,
  valTasks: 100,
  runners: 8,
  seed: 0,
  out: "runs/calc-x",
  device: "cpu",
};

const jsonl = (xs: readonly unknown[]): string => xs.map((x) => `${JSON.stringify(x)}\n`).join("");

/** What the agent did over a set of rollouts, from their reward and `calc_x` annotation spans. */
export interface CalcXStats {
  rollouts: number;
  accuracy: number;
  turnsPerRollout: number;
  toolCallsPerRollout: number;
  /** Of the rollouts that made tool calls, the share whose every call parsed. */
  parsedShare: number;
  /** Share of the rollouts whose conversation outgrew the model's context. */
  contextFullShare: number;
}

/** Statistics of the store's validation rollouts of one validation pass (`val<step>`: 0 is before training). */
export async function validationStats(store: LightningStore, step: number): Promise<CalcXStats> {
  const rollouts = (await store.queryRollouts({ mode_in: ["val"], limit: -1 })).items.filter((r) =>
    String(r.metadata?.data_id ?? "").startsWith(`val${step}-`),
  );
  let correct = 0;
  let turns = 0;
  let toolCalls = 0;
  let withCalls = 0;
  let allParsed = 0;
  let contextFull = 0;
  for (const r of rollouts) {
    const spans = (await store.querySpans(r.rollout_id, { attempt_id: "latest" })).items;
    if ((findFinalReward(spans) ?? 0) >= 1) correct++;
    const note = spans.find((s) => s.name === AGL_ANNOTATION && s.attributes[STATS.turns] !== undefined);
    if (!note) throw new Error(`rollout ${r.rollout_id} has no calc_x annotation: did the agent fail?`);
    const calls = Number(note.attributes[STATS.toolCalls]);
    turns += Number(note.attributes[STATS.turns]);
    if (note.attributes[STATS.contextFull] === true) contextFull++;
    toolCalls += calls;
    if (calls > 0) {
      withCalls++;
      if (Number(note.attributes[STATS.parsedToolCalls]) === calls) allParsed++;
    }
  }
  const n = Math.max(rollouts.length, 1);
  return {
    rollouts: rollouts.length,
    accuracy: correct / n,
    turnsPerRollout: turns / n,
    toolCallsPerRollout: toolCalls / n,
    parsedShare: withCalls === 0 ? 0 : allParsed / withCalls,
    contextFullShare: contextFull / n,
  };
}

export interface CalcXTrainResult {
  code: number;
  command: string[];
  before: CalcXStats | null;
  after: CalcXStats | null;
  seconds: number;
}

/** Writes the task files, runs `agl train`, then reads the before/after statistics from the run's store. */
export async function trainCalcX(options: Partial<CalcXTrainOptions> = {}): Promise<CalcXTrainResult> {
  const o = { ...CALC_X_DEFAULTS, ...options };
  const started = performance.now();
  await rm(o.out, { recursive: true, force: true });
  await mkdir(o.out, { recursive: true });
  await writeFile(join(o.out, "train.jsonl"), jsonl(o.trainSet ?? trainTasks(4096, o.seed + 17)));
  await writeFile(join(o.out, "val.jsonl"), jsonl(heldOutTasks(o.valTasks)));
  const flags: Array<[string, string | number]> = [
    ["--model", "examples/calc-x/model"],
    ["--agent", "examples/calc-x/agent.ts"],
    ["--data", join(o.out, "train.jsonl")],
    ["--val-data", join(o.out, "val.jsonl")],
    ["--out", join(o.out, "run")],
    ["--trace-aggregator-level", o.level],
    ...(o.fullFinetune
      ? []
      : ([
          ["--lora-r", o.loraR],
          ["--lora-alpha", o.loraAlpha],
        ] as Array<[string, number]>)),
    ["--steps", o.steps],
    ["--batch", o.batch],
    ["--group", o.group],
    ["--lr", o.lr],
    ["--lr-decay-share", o.decayShare],
    ["--lr-final", o.lrFinal],
    ["--temperature", o.temperature],
    ["--max-prompt", ROW_LIMITS[o.level].maxPrompt],
    ["--max-response", ROW_LIMITS[o.level].maxResponse],
    ["--val-every", o.valEvery],
    ["--checkpoint-every", o.steps],
    ["--runners", o.runners],
    ["--seed", o.seed],
    ["--device", o.device],
  ];
  const command = ["train", ...flags.flatMap(([k, v]) => [k, String(v)]), ...(o.fullFinetune ? ["--full-finetune"] : [])];
  console.log(`calc-x: agl ${command.join(" ")}`);
  const code = await runCli(command);
  if (code !== 0) return { code, command, before: null, after: null, seconds: (performance.now() - started) / 1000 };
  const store = await openStore(`file:${join(o.out, "run", "store.db")}`);
  try {
    const before = await validationStats(store, 0);
    const after = await validationStats(store, o.steps);
    return { code, command, before, after, seconds: (performance.now() - started) / 1000 };
  } finally {
    await store.close();
  }
}

const pct = (x: number): string => `${(100 * x).toFixed(0)}%`;

export function formatStats(label: string, s: CalcXStats): string {
  return (
    `${label}: held-out accuracy ${pct(s.accuracy)} (${s.rollouts} problems), ${s.turnsPerRollout.toFixed(2)} turns and ` +
    `${s.toolCallsPerRollout.toFixed(2)} tool calls per rollout, tool calls parsed in ${pct(s.parsedShare)} of the rollouts that made them` +
    (s.contextFullShare > 0 ? `, ${pct(s.contextFullShare)} ran out of context` : "")
  );
}

export const CALC_X_COMMAND: ScriptCommand<CalcXTrainOptions> = {
  usage: "npm run demo:calc-x -- [options]   (= npx tsx examples/calc-x/train.ts)",
  about: "The Calc-X demo: GRPO on the multi-turn MCP calculator agent, from the committed SFT model, with `agl train`.",
  defaults: CALC_X_DEFAULTS,
  options: {
    steps: { help: "training steps", integer: true, min: 1 },
    batch: { help: "tasks per step", integer: true, min: 1 },
    group: { help: "rollouts per task (the GRPO group)", integer: true, min: 2 },
    lr: { help: "learning rate", value: "X", min: 0, exclusiveMin: true },
    decayShare: { help: "share of the steps, at the end, over which the lr decays", value: "S", min: 0, max: 1 },
    lrFinal: { help: "the lr factor at the last step", value: "F", min: 0 },
    temperature: { help: "sampling temperature of training rollouts", value: "X", min: 0 },
    loraR: { help: "LoRA rank", integer: true, min: 1 },
    loraAlpha: { help: "LoRA alpha", value: "A", min: 0, exclusiveMin: true },
    fullFinetune: { help: "train every weight instead of a LoRA adapter" },
    level: { help: "what becomes a training row", value: "L", choices: ["trajectory", "transition"] },
    valEvery: { help: "validate every N steps (0: before and after only)", integer: true, min: 0 },
    valTasks: { help: "held-out problems", integer: true, min: 1 },
    runners: { help: "concurrent agent runners", integer: true, min: 1 },
    seed: { help: "seed of the task order and of the samples", integer: true, min: 0 },
    out: { help: "output folder", value: "DIR" },
    device: { help: "training device", value: "D", choices: ["cpu", "webgpu", "auto"] },
  },
};

const proc = (globalThis as { process?: { argv: string[]; exitCode?: number } }).process;
if ((proc?.argv[1] ?? "").endsWith("examples/calc-x/train.ts"))
  proc!.exitCode = await runScript("calc-x", CALC_X_COMMAND, proc!.argv.slice(2), async (options) => {
    const r = await trainCalcX(options);
    if (r.before && r.after) {
      console.log(formatStats("before", r.before));
      console.log(formatStats("after ", r.after));
      console.log(
        `held-out accuracy ${pct(r.before.accuracy)} -> ${pct(r.after.accuracy)} (${r.after.accuracy >= r.before.accuracy ? "+" : ""}` +
          `${(100 * (r.after.accuracy - r.before.accuracy)).toFixed(0)} points) in ${r.seconds.toFixed(0)} s`,
      );
    }
    return r.code;
  });
