/**
 * The GRPO demo (`--estimator` picks another of the PPO family's advantage estimators): trains the calc policy (config.ts) from its SFT checkpoint on arithmetic word
 * problems, with the `openai`-client agent (agent.ts), the policy server, the embedded libSQL store and
 * the GPU trainer when a hardware adapter exists (the CPU reference otherwise). Prints held-out
 * accuracy before and after (greedy, same tasks, same seed) and writes the reward curve as SVG.
 *
 *   npm run demo                      # = npx tsx examples/calc/train.ts
 *   npx tsx examples/calc/train.ts --steps 100 --batch 16 --n 8 --lr 1e-3 --decay-share 0.5 --lr-final 0.1 --out runs/calc
 *   npx tsx examples/calc/train.ts --ops reference   # the plain-TS CPU engine instead of the Wasm kernels
 *   npx tsx examples/calc/train.ts --estimator rloo  # RLOO's baseline instead of GRPO's
 *   npx tsx examples/calc/train.ts --estimator gae --critic-lr 1e-3  # GAE with a critic started from the checkpoint
 */
import { mkdir, rm, writeFile } from "node:fs/promises";
import { GRPO, lateDecay, type GrpoReport } from "../../src/algorithm/grpo.ts";
import { PPO } from "../../src/algorithm/ppo.ts";
import type { AdvantageEstimator } from "../../src/algorithm/ppo-options.ts";
import { CpuTrainer, resolveCpuEngineOptions, type CpuOpsChoice } from "../../src/cpu/index.ts";
import { createCpuValueTrainer, type CpuValueTrainer } from "../../src/cpu/value-trainer.ts";
import { loadCheckpoint, type PolicyTrainer } from "../../src/model/index.ts";
import type { GpuPolicyTrainer } from "../../src/gpu/index.ts";
import { ModelPolicy, PolicyServer } from "../../src/proxy/index.ts";
import { createGenerationEngine } from "../../src/engine/index.ts";
import { LlmProxyTraceToTriplet } from "../../src/adapter/index.ts";
import { openStore } from "../../src/store/index.ts";
import { calcAgent, MAX_ANSWER_TOKENS } from "./agent.ts";
import { calcTrainer } from "./trainer.ts";
import { runScript, type ScriptCommand } from "../../src/cli/script-options.ts";
import { lineChartSvg } from "../../src/cli/svg.ts";
import { heldOutTasks, trainTasks, type CalcTask } from "./tasks.ts";

export interface CalcTrainOptions {
  steps: number;
  /** Tasks per step. */
  batch: number;
  /** Rollouts per task (GRPO group size). */
  n: number;
  lr: number;
  /** Share of the steps, at the end, over which the learning rate decays linearly to `lrFinal` x lr. */
  decayShare: number;
  lrFinal: number;
  valEvery: number;
  /** Held-out tasks used for validation. */
  valTasks: number;
  seed: number;
  checkpoint: string;
  /** Output folder: store database, reward curve, final checkpoint. */
  out: string;
  /** "auto": WebGPU on a hardware adapter, else the CPU reference. */
  backend: "auto" | "cpu" | "webgpu";
  /** Ops of the CPU trainer and generation engine: the Wasm kernels, or the plain-TS reference. */
  ops: CpuOpsChoice;
  runners: number;
  progress: boolean;
  /** Training problems [4096 drawn from seed + 17, none held out]. */
  trainSet?: CalcTask[];
  /** The advantage estimator (verl's `adv_estimator`) [grpo]. gae trains a critic: the checkpoint's decoder
   * with a fresh value head, on the CPU engine. */
  estimator: AdvantageEstimator;
  /** The critic's learning rate (gae only). */
  criticLr: number;
  /** Write each step's generations to `<dir>/<step>.jsonl` [none]. */
  rolloutDataDir?: string;
}

export const CALC_TRAIN_DEFAULTS: CalcTrainOptions = {
  steps: 100,
  batch: 16,
  n: 8,
  lr: 1e-3,
  decayShare: 0.5,
  lrFinal: 0.1,
  valEvery: 20,
  valTasks: 100,
  seed: 0,
  checkpoint: "examples/calc/checkpoint-sft",
  out: "runs/calc",
  backend: "auto",
  ops: "wasm",
  runners: 4,
  progress: true,
  estimator: "grpo",
  criticLr: 1e-3,
};

export interface CalcTrainResult {
  before: number;
  after: number;
  reports: GrpoReport[];
  svgPath: string;
  backend: string;
  seconds: number;
  /** The critic's weights after training (gae only). */
  criticParams?: Float32Array;
}

async function makeTrainer(o: CalcTrainOptions, ckpt: Awaited<ReturnType<typeof loadCheckpoint>>): Promise<PolicyTrainer> {
  const common = { config: ckpt.config, params: ckpt.params, lr: o.lr, weightDecay: 0 };
  const cpu = () => new CpuTrainer({ ...common, ops: o.ops });
  if (o.backend === "cpu") return cpu();
  const gpu = await import("../../src/gpu/index.ts");
  if (o.backend === "auto") {
    const probe = await gpu.probeGpu();
    if (!probe.ok || probe.report.software) {
      if (o.progress) console.log(`no hardware GPU (${probe.ok ? gpu.describeAdapter(probe.report) : probe.reason}); training on the CPU`);
      return cpu();
    }
  }
  return gpu.GpuPolicyTrainer.create(common);
}

export async function trainCalc(options: Partial<CalcTrainOptions> = {}): Promise<CalcTrainResult> {
  const o = { ...CALC_TRAIN_DEFAULTS, ...options };
  resolveCpuEngineOptions({ ops: o.ops });
  const t0 = performance.now();
  const ckpt = await loadCheckpoint(o.checkpoint, undefined, { optimizer: false });
  const trainer = await makeTrainer(o, ckpt);
  // KV-cached generation on the trainer's GPU when it trains there (same device), else the CPU engine
  const engine = await createGenerationEngine({
    backend: trainer.backend === "webgpu" ? "webgpu" : "cpu",
    ops: o.ops,
    context: (trainer as Partial<GpuPolicyTrainer>).ctx,
  });
  const policy = new ModelPolicy({ model: "calc-policy", config: ckpt.config, params: ckpt.params, seed: o.seed, engine });
  const server = new PolicyServer({ policy });
  await mkdir(o.out, { recursive: true });
  const dbPath = `${o.out}/store.db`;
  await rm(dbPath, { force: true });
  const store = await openStore(`file:${dbPath}`);
  const heldOut = heldOutTasks(o.valTasks);
  const train = o.trainSet ?? trainTasks(4096, o.seed + 17, heldOut);
  // GAE's critic: the checkpoint's decoder and a fresh value head (as verl starts its critic from the actor's
  // checkpoint), on the CPU engine whichever backend the policy trains on
  const critic: CpuValueTrainer | null =
    o.estimator === "gae"
      ? createCpuValueTrainer({ config: ckpt.config, policyParams: ckpt.params, lr: o.criticLr, weightDecay: 0, ops: o.ops, seed: o.seed })
      : null;
  const algoOptions: ConstructorParameters<typeof GRPO>[0] = {
    trainer,
    policy,
    steps: o.steps,
    lrSchedule: (step, steps) => o.lr * lateDecay(step, steps, o.decayShare, o.lrFinal),
    batchSize: o.batch,
    nSamples: o.n,
    valEvery: o.valEvery,
    seed: o.seed,
    maxPromptLength: ckpt.config.max_seq_len - MAX_ANSWER_TOKENS,
    maxResponseLength: MAX_ANSWER_TOKENS,
    temperature: 1,
    valTemperature: 0,
    checkpointDir: `${o.out}/checkpoints`,
    checkpointEvery: o.steps,
    progress: o.progress,
    adapter: new LlmProxyTraceToTriplet(),
    rolloutDataDir: o.rolloutDataDir,
  };
  // GRPO is PPO with the grpo estimator; it keeps its own span names (grpo.step)
  const grpo =
    o.estimator === "grpo"
      ? new GRPO(algoOptions)
      : new PPO({
          ...algoOptions,
          advEstimator: o.estimator,
          ...(critic ? { critic: { trainer: critic } } : {}),
        });
  const lightning = calcTrainer({ algorithm: grpo, llmProxy: server, store, runners: o.runners, heartbeatInterval: 5 });
  if (o.progress)
    console.log(
      `calc ${o.estimator}: ${o.steps} steps x ${o.batch} tasks x ${o.n} samples, trainer ${trainer.backend}${trainer.backend === "cpu" ? ` (${o.ops} ops)` : ""}, store ${dbPath}`,
    );
  let criticParams: Float32Array | undefined;
  try {
    await lightning.fit(calcAgent, train, { valDataset: heldOut });
    if (critic) criticParams = (await critic.getState()).params;
  } finally {
    await store.close();
    (trainer as { close?: () => void }).close?.();
    critic?.close();
    engine.close?.();
  }
  const vals = grpo.validations;
  const steps = grpo.steps;
  const svg = lineChartSvg(
    `calc ${o.estimator}: training reward and held-out accuracy`,
    [
      { name: "training reward (mean of the step's rollouts)", color: "#1f77b4", points: steps.map((s) => [s.step, s.reward]) },
      { name: "held-out accuracy (greedy)", color: "#d62728", points: vals.map((v) => [v.step, v.accuracy]) },
    ],
    o.steps,
    "step",
    "reward / accuracy",
  );
  const svgPath = `${o.out}/reward-curve.svg`;
  await writeFile(svgPath, svg);
  return {
    before: vals[0]?.accuracy ?? NaN,
    after: vals[vals.length - 1]?.accuracy ?? NaN,
    reports: grpo.reports,
    svgPath,
    backend: trainer.backend,
    seconds: (performance.now() - t0) / 1000,
    ...(criticParams ? { criticParams } : {}),
  };
}

export const CALC_TRAIN_COMMAND: ScriptCommand<CalcTrainOptions> = {
  usage: "npm run demo -- [options]   (= npx tsx examples/calc/train.ts)",
  about: "The GRPO demo: trains the calc policy from its SFT checkpoint on arithmetic word problems.",
  defaults: CALC_TRAIN_DEFAULTS,
  options: {
    steps: { help: "training steps", integer: true, min: 1 },
    batch: { help: "tasks per step", integer: true, min: 1 },
    n: { help: "rollouts per task (the GRPO group)", integer: true, min: 2 },
    lr: { help: "learning rate", value: "X", min: 0, exclusiveMin: true },
    decayShare: { help: "share of the steps, at the end, over which the lr decays", value: "S", min: 0, max: 1 },
    lrFinal: { help: "the lr factor at the last step", value: "F", min: 0 },
    valEvery: { help: "validate every N steps (0: before and after only)", integer: true, min: 0 },
    valTasks: { help: "held-out problems", integer: true, min: 1 },
    seed: { help: "seed of the task order and of the samples", integer: true, min: 0 },
    runners: { help: "concurrent agent runners", integer: true, min: 1 },
    checkpoint: { help: "the SFT checkpoint to start from", value: "DIR" },
    out: { help: "output folder", value: "DIR" },
    backend: { help: "trainer: WebGPU on a hardware adapter, else the CPU", value: "B", choices: ["auto", "cpu", "webgpu"] },
    ops: { help: "CPU engine ops: the Wasm kernels or the plain-TS reference", value: "OPS", choices: ["wasm", "reference"] },
    estimator: {
      help: "advantage estimator (verl's adv_estimator; gae trains a critic started from the checkpoint)",
      value: "E",
      choices: ["grpo", "gae", "grpo_passk", "rloo", "opo", "gpg", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax"],
    },
    criticLr: { help: "the critic's learning rate (gae)", value: "X", min: 0, exclusiveMin: true },
  },
};

const proc = (globalThis as { process?: { argv: string[]; exitCode?: number } }).process;
if ((proc?.argv[1] ?? "").endsWith("examples/calc/train.ts"))
  proc!.exitCode = await runScript("calc", CALC_TRAIN_COMMAND, proc!.argv.slice(2), async (options) => {
    const r = await trainCalc(options);
    console.log(
      `held-out accuracy: ${(r.before * 100).toFixed(1)}% before, ${(r.after * 100).toFixed(1)}% after (${((r.after - r.before) * 100).toFixed(1)} points) in ${r.seconds.toFixed(0)} s on ${r.backend}`,
    );
    const vals = r.reports.filter((x) => x.kind === "validation");
    const steps = r.reports.filter((x) => x.kind === "step");
    const perStep = (f: (s: (typeof steps)[number]) => number): string => (steps.reduce((a, s) => a + f(s), 0) / steps.length).toFixed(0);
    console.log(`held-out accuracy by step: ${vals.map((v) => `${v.step}: ${(v.accuracy * 100).toFixed(0)}%`).join(", ")}`);
    console.log(
      `per step (mean): ${perStep((s) => s.seconds * 1000)} ms, ${perStep((s) => s.tokens)} tokens in the batch, ${perStep((s) => s.trained_tokens)} trained`,
    );
    console.log(`reward curve: ${r.svgPath}`);
    return 0;
  });
