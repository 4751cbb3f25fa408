/**
 * The calc demo on the Hugging Face path: the SFT checkpoint (examples/calc/checkpoint-sft) is exported
 * as a Hugging Face Llama folder (safetensors + tokenizer.json + chat template), and `agl train` trains
 * a LoRA adapter on it with GRPO — the model loaded through the HF loader, the adapter served to the
 * runners after every step without reloading the base. Prints the held-out accuracy before and after
 * (greedy, the same 100 held-out problems as the main demo) and the `agl train` command it ran.
 *
 *   npm run demo:hf                   # = npx tsx examples/calc/hf.ts
 *   npx tsx examples/calc/hf.ts --steps 100 --lr 3e-3 --lora-r 32 --lora-alpha 32 --out runs/calc-hf
 */
import { mkdir, rm, writeFile } from "node:fs/promises";
import { runCli } from "../../src/cli/agl.ts";
import { runScript, type ScriptCommand } from "../../src/cli/script-options.ts";
import { exportHf, loadCheckpoint } from "../../src/model/index.ts";
import { heldOutTasks, trainTasks } from "./tasks.ts";

export interface CalcHfOptions {
  steps: number;
  batch: number;
  group: number;
  lr: number;
  /** Late decay of the learning rate, as the main demo: the last `decayShare` of the steps down to `lrFinal` x lr. */
  decayShare: number;
  lrFinal: number;
  loraR: number;
  loraAlpha: number;
  /** PPO epochs per step and rows per update (0: all rows, one update per epoch). */
  epochs: number;
  miniBatch: number;
  valEvery: number;
  valTasks: number;
  seed: number;
  out: string;
  device: "cpu" | "webgpu" | "auto";
  /** Keep what an earlier run left in `out` (then `agl train` resumes it) [false: start afresh]. */
  resume: boolean;
}

export const CALC_HF_DEFAULTS: CalcHfOptions = {
  steps: 100,
  batch: 16,
  group: 8,
  lr: 3e-3,
  decayShare: 0.5,
  lrFinal: 0.1,
  loraR: 32,
  loraAlpha: 32,
  epochs: 1,
  miniBatch: 0,
  valEvery: 20,
  valTasks: 100,
  seed: 0,
  out: "runs/calc-hf",
  device: "auto",
  resume: false,
};

const jsonl = (xs: readonly unknown[]): string => xs.map((x) => `${JSON.stringify(x)}\n`).join("");

/** Exports the model and the task files, then runs `agl train`; returns its exit code and the command. */
export async function trainCalcHf(options: Partial<CalcHfOptions> = {}): Promise<{ code: number; command: string[] }> {
  const o = { ...CALC_HF_DEFAULTS, ...options };
  if (!o.resume) await rm(o.out, { recursive: true, force: true });
  await mkdir(o.out, { recursive: true });
  const ckpt = await loadCheckpoint("examples/calc/checkpoint-sft", undefined, { optimizer: false });
  const modelDir = `${o.out}/model`;
  await exportHf(modelDir, { config: ckpt.config, params: ckpt.params });
  const heldOut = heldOutTasks(o.valTasks);
  await writeFile(`${o.out}/train.jsonl`, jsonl(trainTasks(4096, o.seed + 17, heldOut)));
  await writeFile(`${o.out}/val.jsonl`, jsonl(heldOut));
  const flags: Array<[string, string | number]> = [
    ["--model", modelDir],
    ["--agent", "examples/calc/agent.ts"],
    ["--data", `${o.out}/train.jsonl`],
    ["--val-data", `${o.out}/val.jsonl`],
    ["--out", `${o.out}/run`],
    ["--lora-r", o.loraR],
    ["--lora-alpha", o.loraAlpha],
    ["--steps", o.steps],
    ["--batch", o.batch],
    ["--group", o.group],
    ["--lr", o.lr],
    ["--lr-decay-share", o.decayShare],
    ["--lr-final", o.lrFinal],
    ["--epochs", o.epochs],
    ...(o.miniBatch > 0 ? ([["--mini-batch", o.miniBatch]] as Array<[string, number]>) : []),
    ["--max-prompt", 58],
    ["--max-response", 6],
    ["--val-every", o.valEvery],
    ["--checkpoint-every", 10],
    ["--seed", o.seed],
    ["--device", o.device],
  ];
  const command = ["train", ...flags.flatMap(([k, v]) => [k, String(v)])];
  console.log(`calc on the Hugging Face path: agl ${command.join(" ")}`);
  return { code: await runCli(command), command };
}

export const CALC_HF_COMMAND: ScriptCommand<CalcHfOptions> = {
  usage: "npm run demo:hf -- [options]   (= npx tsx examples/calc/hf.ts)",
  about: "The calc demo on the Hugging Face path: the SFT model exported as a Hugging Face folder, a LoRA adapter trained by `agl train`.",
  defaults: CALC_HF_DEFAULTS,
  options: {
    steps: { help: "training steps", integer: true, min: 1 },
    batch: { help: "tasks per step", integer: true, min: 1 },
    group: { help: "rollouts per task (the GRPO group)", integer: true, min: 2 },
    lr: { help: "learning rate", value: "X", min: 0, exclusiveMin: true },
    decayShare: { help: "share of the steps, at the end, over which the lr decays", value: "S", min: 0, max: 1 },
    lrFinal: { help: "the lr factor at the last step", value: "F", min: 0 },
    loraR: { help: "LoRA rank", integer: true, min: 1 },
    loraAlpha: { help: "LoRA alpha", value: "A", min: 0, exclusiveMin: true },
    epochs: { help: "PPO epochs per step", integer: true, min: 1 },
    miniBatch: { help: "rows per update (0: all rows)", integer: true, min: 0 },
    valEvery: { help: "validate every N steps (0: before and after only)", integer: true, min: 0 },
    valTasks: { help: "held-out problems", integer: true, min: 1 },
    seed: { help: "seed of the task order and of the samples", integer: true, min: 0 },
    out: { help: "output folder", value: "DIR" },
    device: { help: "training device", value: "D", choices: ["cpu", "webgpu", "auto"] },
    resume: { help: "keep what an earlier run left in the output folder (agl train resumes it)" },
  },
};

const proc = (globalThis as { process?: { argv: string[]; exitCode?: number } }).process;
if ((proc?.argv[1] ?? "").endsWith("examples/calc/hf.ts"))
  proc!.exitCode = await runScript("calc hf", CALC_HF_COMMAND, proc!.argv.slice(2), async (options) => (await trainCalcHf(options)).code);
