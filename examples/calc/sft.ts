/**
 * Supervised fine-tuning of a fresh calc policy (config.ts) on calc problems: the starting checkpoint of the
 * GRPO demo. It stops early on purpose (a modest held-out accuracy leaves GRPO room to improve).
 *
 *   npx tsx examples/calc/sft.ts [--steps 450] [--batch 32] [--lr 3e-3] [--seed 0] [--out examples/calc/checkpoint-sft]
 *                                [--init <checkpoint>] [--teacher-noise 0] [--preset calc|tiny]
 *
 * The committed checkpoint (examples/calc/checkpoint-sft, 24% greedy accuracy on the 100 held-out problems)
 * is this script with its defaults: 450 steps of 32 problems, about 12 minutes on one free core.
 * Every `--eval-every` steps it also saves `<out>-steps/<step>`.
 */
import {
  applyChatTemplate,
  batchFromTokens,
  encode,
  EOS_ID,
  loadCheckpoint,
  PAD_ID,
  Rng,
  saveCheckpoint,
  type ModelConfig,
} from "../../src/model/index.ts";
import { CpuTrainer } from "../../src/cpu/index.ts";
import { CALC_CONFIG, CALC_TINY_CONFIG } from "./config.ts";
import { cpuGenerationEngine } from "../../src/cpu/generation.ts";
import { MAX_ANSWER_TOKENS } from "./agent.ts";
import { heldOutTasks, reward, trainTasks, type CalcTask } from "./tasks.ts";
import { runScript, type ScriptCommand } from "../../src/cli/script-options.ts";

export interface SftOptions {
  /** Start from this checkpoint instead of a fresh init. */
  init?: string | null;
  /**
   * Share of subtraction and multiplication demonstrations where the teacher applies the wrong
   * operation (it adds the operands) [0]. A teacher with this systematic mistake makes a starting
   * point that imitation alone cannot fix and a verifiable reward can.
   */
  teacherNoise?: number;
  steps: number;
  batch: number;
  lr: number;
  seed: number;
  evalEvery: number;
  out: string | null;
  config: ModelConfig;
  log?: (line: string) => void;
}

export const SFT_DEFAULTS: SftOptions = {
  steps: 450,
  batch: 32,
  lr: 3e-3,
  seed: 0,
  evalEvery: 50,
  out: "examples/calc/checkpoint-sft",
  config: CALC_CONFIG,
};

export const promptIds = (t: CalcTask): number[] =>
  applyChatTemplate([{ role: "user", content: t.question }], { addGenerationPrompt: true });
export const answerIds = (t: CalcTask, answer = t.answer): number[] => [...encode(String(answer)), EOS_ID];

/** Greedy accuracy of `params` on `tasks`, generating directly (no server). */
export async function greedyAccuracy(config: ModelConfig, params: Float32Array, tasks: readonly CalcTask[]): Promise<number> {
  const out = await cpuGenerationEngine.generate(
    config,
    params,
    tasks.map((t) => ({ prompt: promptIds(t), maxTokens: MAX_ANSWER_TOKENS, temperature: 0 })),
  );
  return out.reduce((s, g, i) => s + reward(tasks[i], g.text), 0) / tasks.length;
}

export async function runSft(o: SftOptions): Promise<{ params: Float32Array; accuracy: number }> {
  const log = o.log ?? console.log;
  const start = o.init ? await loadCheckpoint(o.init, undefined, { optimizer: false }) : null;
  const trainer = new CpuTrainer({ config: start?.config ?? o.config, params: start?.params, seed: o.seed, lr: o.lr, weightDecay: 0 });
  const config = start?.config ?? o.config;
  const noise = o.teacherNoise ?? 0;
  const teacher = new Rng(o.seed + 99);
  // the teacher's answer: right, except that it adds the operands of a share of - and * problems
  const taught = (t: CalcTask): number => (t.op !== "+" && teacher.uniform() < noise ? t.a + t.b : t.answer);
  const heldOut = heldOutTasks();
  const data = trainTasks(o.steps * o.batch, o.seed + 1, heldOut);
  const t0 = Date.now();
  for (let s = 0; s < o.steps; s++) {
    const rows = data.slice(s * o.batch, (s + 1) * o.batch).map((t) => ({ prompt: promptIds(t), response: answerIds(t, taught(t)) }));
    const m = await trainer.sftStep(batchFromTokens(rows, { padId: PAD_ID }), { lr: o.lr * Math.min(1, (s + 1) / 20) });
    if ((s + 1) % o.evalEvery === 0 || s + 1 === o.steps) {
      const { params } = await trainer.getState();
      const acc = await greedyAccuracy(config, params, heldOut);
      if (o.out) await saveCheckpoint(`${o.out}-steps/${s + 1}`, { config, params });
      log(
        `sft step ${s + 1}/${o.steps} loss ${m.loss.toFixed(3)} held-out accuracy ${(acc * 100).toFixed(1)}% (${((Date.now() - t0) / 1000).toFixed(0)} s)`,
      );
    }
  }
  const { params } = await trainer.getState();
  const accuracy = await greedyAccuracy(config, params, heldOut);
  if (o.out) await saveCheckpoint(o.out, { config, params });
  return { params, accuracy };
}

export const CALC_SFT_COMMAND: ScriptCommand<SftOptions> = {
  usage: "npx tsx examples/calc/sft.ts [options]",
  about: "Supervised fine-tuning of the calc demo's policy on generated problems (the checkpoint the GRPO demo starts from).",
  defaults: SFT_DEFAULTS,
  options: {
    steps: { help: "SFT steps", integer: true, min: 1 },
    batch: { help: "problems per step", integer: true, min: 1 },
    lr: { help: "learning rate", value: "X", min: 0, exclusiveMin: true },
    seed: { help: "seed of the init and the data", integer: true, min: 0 },
    evalEvery: { help: "held-out accuracy every N steps", integer: true, min: 1 },
    out: { help: "checkpoint folder (none: do not save)", value: "DIR", parse: (v) => (v === "none" ? null : v) },
    init: { help: "start from this checkpoint instead of a fresh init", type: "string", value: "DIR" },
    teacherNoise: { help: "share of demonstrations where the teacher adds instead [0]", type: "number", value: "X", min: 0, max: 1 },
    config: {
      flag: "preset",
      help: "model size: calc (0.12M parameters) or tiny (0.82M) [calc]",
      value: "P",
      type: "string",
      choices: ["calc", "tiny"],
      parse: (v) => (v === "tiny" ? CALC_TINY_CONFIG : CALC_CONFIG),
    },
  },
};

const proc = (globalThis as { process?: { argv: string[]; exitCode?: number } }).process;
if ((proc?.argv[1] ?? "").endsWith("examples/calc/sft.ts"))
  proc!.exitCode = await runScript("calc sft", CALC_SFT_COMMAND, proc!.argv.slice(2), async (options) => {
    const o = { ...SFT_DEFAULTS, ...options };
    const r = await runSft(o);
    console.log(`final held-out accuracy ${(r.accuracy * 100).toFixed(1)}%${o.out ? `, saved to ${o.out}` : ""}`);
    return 0;
  });
