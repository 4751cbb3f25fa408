/**
 * The SQL demo: LoRA-GRPO trains the `write` node of the SQL agent (agent.ts, LangGraph.js) with `agl
 * train --agent-match '^write$'`, from the committed SFT model (examples/sql-agent/model, made by sft.ts),
 * while `check` and `rewrite` run on the frozen base. Prints the held-out execution accuracy of the whole
 * agent (greedy, the fixed 60 held-out questions) at each validation, the calls per rollout of each node
 * and which weights served them, read back from the store the run wrote (OUT/run/store.db), and writes the
 * reward curve (OUT/run/reward-curve.svg).
 *
 *   npm run demo:sql                      # = npx tsx examples/sql-agent/train.ts
 *   npx tsx examples/sql-agent/train.ts --seed 1 --out runs/sql-1
 */
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { agentName } from "../../src/adapter/agent-name.ts";
import type { ValidationReport } from "../../src/algorithm/ppo-reports.ts";
import { runCli } from "../../src/cli/agl.ts";
import { runScript, type ScriptCommand } from "../../src/cli/script-options.ts";
import { LLM_CALL_SPAN_NAME, POLICY_ADAPTER_ATTRIBUTE } from "../../src/proxy/llm-span.ts";
import type { LightningStore } from "../../src/store/base.ts";
import { openStore } from "../../src/store/index.ts";
import { heldOutTasks, type SqlTask, trainTasks } from "./tasks.ts";

export interface SqlTrainOptions {
  steps: number;
  /** Questions per step, and rollouts per question (the GRPO group). */
  batch: number;
  group: number;
  lr: number;
  /** Over the last `decayShare` of the steps the learning rate decays linearly to `lrFinal` x lr. */
  decayShare: number;
  lrFinal: number;
  temperature: number;
  loraR: number;
  loraAlpha: number;
  /** The agents trained (a regular expression searched in each call's agent name). */
  agentMatch: string;
  valEvery: number;
  runners: number;
  seed: number;
  out: string;
  model: string;
  device: "cpu" | "webgpu" | "auto";
  /** Training questions [4096 drawn from seed + 17, none held out]. */
  trainSet?: readonly SqlTask[];
  /** Held-out questions [the 60 of tasks.ts]. */
  valSet?: readonly SqlTask[];
}

export const SQL_DEFAULTS: SqlTrainOptions = {
  steps: 40,
  batch: 16,
  group: 8,
  lr: 3e-3,
  decayShare: 0.5,
  lrFinal: 0.1,
  temperature: 1,
  loraR: 16,
  loraAlpha: 32,
  agentMatch: "^write$",
  valEvery: 10,
  runners: 8,
  seed: 0,
  out: "runs/sql",
  model: "examples/sql-agent/model",
  device: "cpu",
};

/** Row limits: a `write` call's prompt (schema and question: at most about 100 tokens) and its reply. */
export const ROW_LIMITS = { maxPrompt: 144, maxResponse: 96 } as const;

const jsonl = (xs: readonly unknown[]): string => xs.map((x) => `${JSON.stringify(x)}\n`).join("");

/** What each node did over one validation pass's rollouts, from their LLM-call spans. */
export interface NodeCalls {
  rollouts: number;
  /** Model calls per rollout, by agent name. */
  callsPerRollout: Record<string, number>;
  /** Share of each agent's calls served with the trained adapter. */
  adapterShare: Record<string, number>;
}

/** The calls of the validation pass at `step` (`val<step>-…` rollouts), by agent. */
export async function validationCalls(store: LightningStore, step: number): Promise<NodeCalls> {
  const rollouts = (await store.queryRollouts({ mode_in: ["val"], limit: -1 })).items.filter((r) =>
    String(r.metadata?.data_id ?? "").startsWith(`val${step}-`),
  );
  const calls: Record<string, number> = {};
  const adapted: Record<string, number> = {};
  for (const r of rollouts)
    for (const s of (await store.querySpans(r.rollout_id, { attempt_id: "latest" })).items) {
      if (s.name !== LLM_CALL_SPAN_NAME) continue;
      const name = agentName(s) ?? "(none)";
      calls[name] = (calls[name] ?? 0) + 1;
      if (s.attributes[POLICY_ADAPTER_ATTRIBUTE] === true) adapted[name] = (adapted[name] ?? 0) + 1;
    }
  const n = Math.max(rollouts.length, 1);
  return {
    rollouts: rollouts.length,
    callsPerRollout: Object.fromEntries(Object.entries(calls).map(([k, v]) => [k, v / n])),
    adapterShare: Object.fromEntries(Object.entries(calls).map(([k, v]) => [k, (adapted[k] ?? 0) / v])),
  };
}

export interface SqlTrainResult {
  code: number;
  command: string[];
  /** Held-out accuracy at each validation (step 0 is before training). */
  validations: ValidationReport[];
  before: NodeCalls | null;
  after: NodeCalls | null;
  seconds: number;
}

/** Writes the task files, runs `agl train`, then reads the validations and the calls per node back. */
export async function trainSql(options: Partial<SqlTrainOptions> = {}): Promise<SqlTrainResult> {
  const o = { ...SQL_DEFAULTS, ...options };
  const started = performance.now();
  await rm(o.out, { recursive: true, force: true });
  await mkdir(o.out, { recursive: true });
  await writeFile(join(o.out, "train.jsonl"), jsonl(o.trainSet ?? trainTasks(4096, o.seed + 17)));
  await writeFile(join(o.out, "val.jsonl"), jsonl(o.valSet ?? heldOutTasks()));
  const flags: Array<[string, string | number]> = [
    ["--model", o.model],
    ["--agent", "examples/sql-agent/agent.ts"],
    ["--agent-match", o.agentMatch],
    ["--data", join(o.out, "train.jsonl")],
    ["--val-data", join(o.out, "val.jsonl")],
    ["--out", join(o.out, "run")],
    ["--lora-r", o.loraR],
    ["--lora-alpha", o.loraAlpha],
    ["--steps", o.steps],
    ["--batch", o.batch],
    ["--group", o.group],
    ["--lr", o.lr],
    ["--lr-decay-share", o.decayShare],
    ["--lr-final", o.lrFinal],
    ["--temperature", o.temperature],
    ["--max-prompt", ROW_LIMITS.maxPrompt],
    ["--max-response", ROW_LIMITS.maxResponse],
    ["--val-every", o.valEvery],
    ["--checkpoint-every", o.steps],
    ["--runners", o.runners],
    ["--seed", o.seed],
    ["--device", o.device],
  ];
  const command = ["train", ...flags.flatMap(([k, v]) => [k, String(v)])];
  console.log(`sql: agl ${command.map((a) => (/[\s^$*]/.test(a) ? `'${a}'` : a)).join(" ")}`);
  const code = await runCli(command);
  const seconds = () => (performance.now() - started) / 1000;
  if (code !== 0) return { code, command, validations: [], before: null, after: null, seconds: seconds() };
  const validations = (await readFile(join(o.out, "run", "metrics.jsonl"), "utf8"))
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as { kind: string })
    .filter((r): r is ValidationReport => r.kind === "validation");
  const store = await openStore(`file:${join(o.out, "run", "store.db")}`);
  try {
    return {
      code,
      command,
      validations,
      before: await validationCalls(store, 0),
      after: await validationCalls(store, o.steps),
      seconds: seconds(),
    };
  } finally {
    await store.close();
  }
}

const pct = (x: number): string => `${(100 * x).toFixed(0)}%`;

export function formatCalls(label: string, c: NodeCalls): string {
  const nodes = Object.keys(c.callsPerRollout).sort();
  return `${label}: calls per rollout ${nodes.map((k) => `${k} ${c.callsPerRollout[k]!.toFixed(2)}`).join(", ")}; served by the adapter: ${nodes
    .map((k) => `${k} ${pct(c.adapterShare[k]!)}`)
    .join(", ")}`;
}

export const SQL_COMMAND: ScriptCommand<SqlTrainOptions> = {
  usage: "npm run demo:sql -- [options]   (= npx tsx examples/sql-agent/train.ts)",
  about:
    "The SQL demo: LoRA-GRPO on the SQL agent's write node (check and rewrite on the frozen base), from the committed SFT model, with `agl train`.",
  defaults: SQL_DEFAULTS,
  options: {
    steps: { help: "training steps", integer: true, min: 1 },
    batch: { help: "questions per step", integer: true, min: 1 },
    group: { help: "rollouts per question (the GRPO group)", integer: true, min: 2 },
    lr: { help: "learning rate", value: "X", min: 0, exclusiveMin: true },
    decayShare: { help: "share of the steps, at the end, over which the lr decays", value: "S", min: 0, max: 1 },
    lrFinal: { help: "the lr factor at the last step", value: "F", min: 0 },
    temperature: { help: "sampling temperature of training rollouts", value: "X", min: 0 },
    loraR: { help: "LoRA rank", integer: true, min: 1 },
    loraAlpha: { help: "LoRA alpha", value: "A", min: 0, exclusiveMin: true },
    agentMatch: { help: "agents trained (a regular expression searched in the agent name)", value: "RE" },
    valEvery: { help: "validate every N steps (0: before and after only)", integer: true, min: 0 },
    runners: { help: "concurrent agent runners", integer: true, min: 1 },
    seed: { help: "seed of the task order and of the samples", integer: true, min: 0 },
    out: { help: "output folder", value: "DIR" },
    model: { help: "the starting policy (a Hugging Face folder)", value: "DIR" },
    device: { help: "training device", value: "D", choices: ["cpu", "webgpu", "auto"] },
  },
};

const proc = (globalThis as { process?: { argv: string[]; exitCode?: number } }).process;
if ((proc?.argv[1] ?? "").endsWith("examples/sql-agent/train.ts"))
  proc!.exitCode = await runScript("sql", SQL_COMMAND, proc!.argv.slice(2), async (options) => {
    const r = await trainSql(options);
    if (r.code === 0 && r.validations.length >= 2) {
      const first = r.validations[0]!,
        last = r.validations.at(-1)!;
      console.log(`held-out execution accuracy by step: ${r.validations.map((v) => `${v.step}: ${pct(v.accuracy)}`).join(", ")}`);
      if (r.before) console.log(formatCalls("before", r.before));
      if (r.after) console.log(formatCalls("after ", r.after));
      const gain = 100 * (last.accuracy - first.accuracy);
      console.log(
        `held-out execution accuracy ${pct(first.accuracy)} -> ${pct(last.accuracy)} (${gain >= 0 ? "+" : ""}${gain.toFixed(0)} points) in ${r.seconds.toFixed(0)} s`,
      );
    }
    return r.code;
  });
