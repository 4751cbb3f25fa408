/**
 * `agl train`: GRPO with a LoRA adapter (or full fine-tuning) on a Hugging Face model, from flags or a config
 * file (docs/lora.md#agl-train). The pieces are the library's: `loadPretrained`, a policy trainer (WebGPU or
 * CPU), a ModelPolicy serving base + adapter (or the trained model) behind the policy server, the Trainer's
 * runners running the user's agent module, the GRPO algorithm. What this file adds is the run's folder:
 *
 *   OUT/run.json              the settings that define the run (a different run needs another folder)
 *   OUT/progress.json         the last completed checkpoint, written after it is complete
 *   OUT/checkpoints/step-N/   trained weights + optimizer state (and the critic's in critic/); written as step-N.tmp, then renamed
 *   OUT/adapter/ (OUT/model/) the latest adapter, for `agl serve --adapter` (the latest model: train-weights.ts)
 *   OUT/metrics.jsonl         one line per step and validation report
 *   OUT/reward-curve.svg      training reward and validation accuracy
 *   OUT/store.db              the embedded store (unless --store / --store-server)
 *
 * Running the same command again resumes: the adapter, optimizer and critic come from the last checkpoint, the
 * task order continues where that step left it, and the metrics after it (work lost with the crash)
 * are dropped.
 */
import { lateDecay, type GrpoReport } from "../algorithm/grpo.ts";
import { criticCheckpointDir, PPO } from "../algorithm/ppo.ts";
import type { PpoOptions } from "../algorithm/ppo-options.ts";
import { stepsOfEpochs, verlLrFactor, warmupSteps } from "../algorithm/verl-config.ts";
import { LlmProxyTraceToTriplet } from "../adapter/proxy-triplet.ts";
import { LightningStoreClient } from "../client/client.ts";
import { loadPretrained, type PretrainedModel, readModelInfo } from "../model/hf/index.ts";
import { CpuTrainer } from "../cpu/trainer.ts";
import { type CpuValueTrainer, createCpuValueTrainer } from "../cpu/value-trainer.ts";
import { loadValueCheckpoint, saveValueCheckpoint } from "../model/value-checkpoint.ts";
import type { ValueTrainer, ValueTrainerState } from "../model/value-types.ts";
import type { PolicyTrainer } from "../model/train-types.ts";
import { platform } from "../platform/index.ts";
import type { GpuContext } from "../gpu/context.ts";
import { createGenerationEngine } from "../engine/factory.ts";
import type { GenerationEngine } from "../model/generation.ts";
import { ModelPolicy } from "../proxy/policy.ts";
import { PolicyServer } from "../proxy/policy-server.ts";
import { llmRollout } from "../runner/functional.ts";
import type { LitAgent } from "../runner/litagent.ts";
import { UsageError } from "../server/config.ts";
import type { LightningStore } from "../store/base.ts";
import { openStore } from "../store/libsql/open.ts";
import { Trainer } from "../trainer/trainer.ts";
import { lineChartSvg } from "./svg.ts";
import { type FittedTrainConfig, fitRowLimits, type TrainConfig, usesCritic } from "./train-config.ts";
import { trainedWeights, type TrainedState, type TrainedWeights } from "./train-weights.ts";

export interface TrainRunResult {
  /** Steps already done when this run started (0 for a fresh folder). */
  startStep: number;
  /** Every report of the run's folder, resumed ones included, in order. */
  reports: GrpoReport[];
  backend: "cpu" | "webgpu";
  /** The latest trained weights: OUT/adapter, or OUT/model with fullFinetune. */
  weightsDir: string;
  svgPath: string;
  seconds: number;
}

/** The settings that make two invocations the same run (others, e.g. steps or lr, may change on resume). */
function runIdentity(c: TrainConfig): Record<string, unknown> {
  return {
    model: c.model,
    loraR: c.loraR,
    loraAlpha: c.loraAlpha,
    loraTargets: [...c.loraTargets].sort(),
    ...(c.fullFinetune ? { fullFinetune: true } : {}),
    seed: c.seed,
    batch: c.batch,
    data: c.data,
  };
}

const join = (dir: string, name: string): string => (dir.endsWith("/") ? dir + name : `${dir}/${name}`);

async function readJsonIfThere(path: string): Promise<unknown | null> {
  const io = platform.files();
  if (!(await io.exists(path))) return null;
  const text = new TextDecoder().decode(await io.readFile(path));
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new UsageError(`${path} is not JSON (${(e as Error).message}): the output folder is damaged; use another --out`);
  }
}

/** Writes a file whole under a temporary name, then renames it, so a crash never leaves half of it. */
async function writeAtomic(path: string, text: string): Promise<void> {
  const io = platform.files();
  await io.writeFile(`${path}.tmp`, new TextEncoder().encode(text));
  await io.rename(`${path}.tmp`, path);
}

/** Tasks of a JSONL file (blank lines skipped); a bad line is named by file and line number. */
export function readJsonl(path: string): unknown[] {
  let text: string;
  try {
    text = platform.readTextFile(path);
  } catch (e) {
    throw new UsageError(`cannot read ${path}: ${(e as Error).message}`);
  }
  const tasks: unknown[] = [];
  text.split("\n").forEach((line, i) => {
    if (line.trim() === "") return;
    try {
      tasks.push(JSON.parse(line));
    } catch (e) {
      throw new UsageError(`${path}:${i + 1}: not JSON (${(e as Error).message})`);
    }
  });
  if (tasks.length === 0) throw new UsageError(`${path} holds no tasks`);
  return tasks;
}

/** The agent a module exports (default or `agent`): a LitAgent as it is, a function as an LLM rollout. */
export async function importAgent(path: string, cwd: string): Promise<LitAgent<unknown>> {
  const url = new URL(path, `file://${cwd.endsWith("/") ? cwd : `${cwd}/`}`).href;
  let mod: Record<string, unknown>;
  try {
    mod = await platform.importModule(url);
  } catch (e) {
    throw new UsageError(`cannot import the agent module ${path}: ${(e as Error).message}`);
  }
  const agent = mod.default ?? mod.agent;
  // duck-typed: the module may import the library from another copy (the package vs its sources)
  // (a FunctionalLitAgent is itself callable, so look for the method before treating it as a function)
  if (
    (typeof agent === "object" || typeof agent === "function") &&
    agent !== null &&
    typeof (agent as LitAgent).trainingRollout === "function"
  )
    return agent as LitAgent<unknown>;
  if (typeof agent === "function") return llmRollout(agent as Parameters<typeof llmRollout>[0]) as LitAgent<unknown>;
  throw new UsageError(
    `${path} must export (as default or \`agent\`) a LitAgent or a rollout function (task, llm) => reward; it exports ${Object.keys(mod).join(", ") || "nothing"}`,
  );
}

/**
 * The options a policy trainer (CPU or WebGPU) gets from the run's settings: the optimizer's, the seed and what
 * it trains (`weights`, from `resume` when given). bench/calc-x-replay.ts builds its trainer from them too.
 */
export function trainerOptions(
  c: TrainConfig,
  model: PretrainedModel,
  weights: TrainedWeights = trainedWeights(c, model),
  resume: TrainedState | null = null,
) {
  return {
    config: model.config,
    lr: c.lr,
    weightDecay: c.weightDecay,
    beta1: c.betas[0],
    beta2: c.betas[1],
    maxGradNorm: c.gradClip,
    optimizer: resume?.optimizer,
    seed: c.seed,
    ...weights.trainerOptions(resume),
  };
}

async function makeTrainer(
  c: TrainConfig,
  model: PretrainedModel,
  weights: TrainedWeights,
  resume: TrainedState | null,
  log: (m: string) => void,
): Promise<PolicyTrainer> {
  const common = trainerOptions(c, model, weights, resume);
  const cpu = (): CpuTrainer => {
    if (c.recompute) log("--recompute applies to the WebGPU trainer: the CPU trainer keeps every layer's activations");
    if (c.gpuWeights !== "f32")
      log(`--gpu-weights ${c.gpuWeights} applies to the WebGPU trainer: the CPU trainer keeps the base in float32`);
    return new CpuTrainer(common);
  };
  if (c.device === "cpu") return cpu();
  const gpu = await import("../gpu/index.ts");
  if (c.device === "auto") {
    const probe = await gpu.probeGpu();
    if (!probe.ok || probe.report.software) {
      log(
        `training on the CPU: ${probe.ok ? `the WebGPU adapter is a software one (${gpu.describeAdapter(probe.report)})` : probe.reason}`,
      );
      return cpu();
    }
  }
  if (c.gpuWeights !== "f32" && weights.lora === null)
    log(`--gpu-weights ${c.gpuWeights} applies to a LoRA base: full fine-tuning keeps every weight in float32`);
  const trainer = await gpu.GpuPolicyTrainer.create({
    ...common,
    ...(weights.lora !== null ? { weightFormat: c.gpuWeights } : {}),
    recomputeActivations: c.recompute,
  });
  return trainer;
}

async function openRunStore(c: TrainConfig): Promise<LightningStore> {
  if (c.storeServer !== null) {
    const client = new LightningStoreClient(c.storeServer);
    // One line naming the address at the start, not a stack at the first rollout.
    await client.checkHealth();
    return client;
  }
  return openStore(c.store ?? `file:${join(c.out, "store.db")}`);
}

function rewardCurve(reports: readonly GrpoReport[], steps: number): string {
  const stepReports = reports.filter((r) => r.kind === "step");
  const vals = reports.filter((r) => r.kind === "validation");
  return lineChartSvg(
    "agl train: training reward and validation accuracy",
    [
      { name: "training reward (mean of the step's rollouts)", color: "#1f77b4", points: stepReports.map((s) => [s.step, s.reward]) },
      { name: "validation accuracy (greedy)", color: "#d62728", points: vals.map((v) => [v.step, v.accuracy]) },
    ],
    steps,
    "GRPO step",
    "reward / accuracy",
  );
}

/** Claims `c.out` for this run: a folder that holds another run is refused, a new one gets run.json. */
async function claimRunFolder(c: TrainConfig): Promise<void> {
  await platform.files().mkdir(join(c.out, "checkpoints"));
  const runPath = join(c.out, "run.json");
  const identity = runIdentity(c);
  const previous = (await readJsonIfThere(runPath)) as Record<string, unknown> | null;
  if (previous !== null && JSON.stringify(previous) !== JSON.stringify(identity))
    throw new UsageError(
      `${c.out} holds another run (${[...new Set([...Object.keys(identity), ...Object.keys(previous)])]
        .filter((k) => JSON.stringify(previous[k]) !== JSON.stringify(identity[k]))
        .join(", ")} differ): use another --out`,
    );
  await writeAtomic(runPath, `${JSON.stringify(identity, null, 2)}\n`);
}

/**
 * Cancels the rollouts an interrupted run left open (queued, being prepared or run): they would call its
 * policy server, which is gone, and nothing waits for them any more. One line says how many.
 */
async function cancelLeftOpen(store: LightningStore, log: (m: string) => void): Promise<void> {
  const open = await store.queryRollouts({ status_in: ["queuing", "requeuing", "preparing", "running"] });
  for (const r of open.items) await store.updateRollout(r.rollout_id, { status: "cancelled" });
  if (open.items.length > 0)
    log(`cancelled ${open.items.length} rollouts an earlier, interrupted run left open (they called its policy server, which is gone)`);
}

/** Where an earlier invocation stopped: the last completed checkpoint's step and state, and its critic's
 * when it holds one (step 0 and nulls in a new folder). */
async function resumePoint(
  c: TrainConfig,
  weights: TrainedWeights,
  log: (m: string) => void,
): Promise<{ startStep: number; resume: TrainedState | null; resumeCritic: ValueTrainerState | null }> {
  const progress = (await readJsonIfThere(join(c.out, "progress.json"))) as { step: number; checkpoint: string } | null;
  if (progress === null) return { startStep: 0, resume: null, resumeCritic: null };
  const dir = join(c.out, progress.checkpoint);
  const resume = await weights.load(dir);
  const criticDir = criticCheckpointDir(dir);
  const resumeCritic = usesCritic(c) && (await platform.files().exists(criticDir)) ? await loadValueCheckpoint(criticDir) : null;
  log(`resuming after step ${progress.step} from ${dir}`);
  return { startStep: progress.step, resume, resumeCritic };
}

/** The reports in metrics.jsonl up to `startStep`: those after it are work lost with the crash. */
async function reportsUpTo(metricsPath: string, startStep: number): Promise<GrpoReport[]> {
  const io = platform.files();
  const reports: GrpoReport[] = [];
  if (startStep > 0 && (await io.exists(metricsPath)))
    for (const line of new TextDecoder().decode(await io.readFile(metricsPath)).split("\n"))
      if (line.trim() !== "") {
        const r = JSON.parse(line) as GrpoReport;
        if (r.step <= startStep) reports.push(r);
      }
  return reports;
}

/** The policy the runners call: the trainer's weights (or base + adapter), generating on the trainer's backend. */
async function servedPolicy(
  c: TrainConfig,
  model: PretrainedModel,
  tokenizer: NonNullable<PretrainedModel["tokenizer"]>,
  weights: TrainedWeights,
  trainer: PolicyTrainer,
  startStep: number,
): Promise<{ policy: ModelPolicy; engine: GenerationEngine }> {
  const state = await trainer.getState();
  const engine = await createGenerationEngine({
    backend: trainer.backend === "webgpu" ? "webgpu" : "cpu",
    context: (trainer as { ctx?: GpuContext }).ctx,
  });
  const policy = new ModelPolicy({
    model: model.name,
    config: model.config,
    ...weights.policyWeights(state.params),
    tokenizer,
    version: startStep,
    engine,
    seed: c.seed,
  });
  return { policy, engine };
}

/** Saves a checkpoint as step-N (written as step-N.tmp, then renamed), the critic's state in its `critic`
 * folder, then progress.json pointing at it, then the latest weights. progress.json is the commit point: a
 * step-N or step-N.tmp it does not name is what a run stopped mid-save left, and is replaced. */
function checkpointSaver(c: TrainConfig, weights: TrainedWeights) {
  const io = platform.files();
  return async (step: number, t: PolicyTrainer, critic: ValueTrainer | null): Promise<void> => {
    const s = await t.getState();
    const name = `checkpoints/step-${step}`;
    await io.remove(join(c.out, `${name}.tmp`));
    await io.remove(join(c.out, name));
    await weights.save(join(c.out, `${name}.tmp`), s);
    if (critic) await saveValueCheckpoint(criticCheckpointDir(join(c.out, `${name}.tmp`)), await critic.getState());
    await io.rename(join(c.out, `${name}.tmp`), join(c.out, name));
    await writeAtomic(join(c.out, "progress.json"), `${JSON.stringify({ step, checkpoint: name })}\n`);
    await weights.saveLatest(s.params);
  };
}

/** The run's step count: `steps`, or `totalEpochs` passes of whole batches over the `tasks` training tasks. */
export function resolveSteps(c: TrainConfig, tasks: number): TrainConfig {
  if (c.totalEpochs === null) return c;
  try {
    return { ...c, steps: stepsOfEpochs(c.totalEpochs, tasks, c.batch), totalEpochs: null };
  } catch (e) {
    throw new UsageError(`--total-epochs ${c.totalEpochs}: ${(e as Error).message}`);
  }
}

/** The learning rate of step `step` of `steps`: verl's warmup and schedule, times the late decay. */
export function lrOf(c: TrainConfig, step: number, steps: number): number {
  const schedule = {
    warmupSteps: warmupSteps({ warmupSteps: c.lrWarmupSteps, warmupRatio: c.lrWarmupRatio }, steps),
    type: c.lrScheduler,
    minLrRatio: c.lrMinRatio,
    numCycles: c.lrNumCycles,
  };
  return c.lr * verlLrFactor(step, steps, schedule) * lateDecay(step, steps, c.lrDecayShare, c.lrFinal);
}

/** The PPO-family options of the config (the critic's trainer aside), from `startStep` on. */
export function ppoOptionsOf(
  c: FittedTrainConfig,
  parts: {
    trainer: PolicyTrainer;
    policy: ModelPolicy;
    /** LoRA: the base is the KL reference. */
    lora: boolean;
    startStep: number;
    saveCheckpoint?: (step: number, t: PolicyTrainer, critic: ValueTrainer | null) => Promise<void>;
    onReport?: (r: GrpoReport) => void;
    /** The critic's trainer, when the run has one. */
    critic?: ValueTrainer | null;
  },
): PpoOptions {
  return {
    trainer: parts.trainer,
    policy: parts.policy,
    steps: c.steps,
    startStep: Math.min(parts.startStep, c.steps),
    batchSize: c.batch,
    nSamples: c.group,
    lr: c.lr,
    lrSchedule: (step, steps) => lrOf(c, step, steps),
    ppoEpochs: c.epochs,
    miniBatchSize: c.miniBatch ?? undefined,
    microBatchSize: c.microBatch ?? undefined,
    loss: {
      lossMode: c.lossMode,
      clipCovRatio: c.clipCovRatio,
      clipCovLb: c.clipCovLb,
      clipCovUb: c.clipCovUb,
      klCovRatio: c.klCovRatio,
      ppoKlCoef: c.ppoKlCoef,
      clipRatio: c.clipRatio,
      clipRatioLow: c.clipRatioLow ?? undefined,
      clipRatioHigh: c.clipRatioHigh ?? undefined,
      clipRatioC: c.clipRatioC,
      lossAggMode: c.lossAggMode,
      entropyCoeff: c.entropyCoeff,
      klLossCoef: c.klCoef,
      klLossType: c.klType,
    },
    normByStd: c.normAdvByStd,
    // the KL to the base is free with an adapter (the base is the reference); full fine-tuning has none
    trackKl: parts.lora,
    maxPromptLength: c.maxPrompt,
    maxResponseLength: c.maxResponse,
    traceAggregator: c.traceAggregator,
    grouping: c.grouping,
    temperature: c.temperature,
    valEvery: c.valEvery,
    // 0: only the last step's (which is always written)
    checkpointEvery: c.checkpointEvery > 0 ? c.checkpointEvery : c.steps,
    seed: c.seed,
    progress: c.progress,
    adapter: new LlmProxyTraceToTriplet({ agentMatch: c.agentMatch }),
    saveCheckpoint: parts.saveCheckpoint,
    onReport: parts.onReport,
    advEstimator: c.advEstimator,
    gamma: c.gamma,
    lam: c.lam,
    useKlInReward: c.useKlInReward,
    klPenalty: c.klPenalty,
    klCtrl: c.klCtrl,
    criticWarmup: c.criticWarmup,
    rolloutDataDir: c.rolloutDataDir,
    ...(parts.critic
      ? {
          critic: {
            trainer: parts.critic,
            cliprangeValue: c.critic.cliprangeValue,
            lr: c.critic.lr,
            ppoEpochs: c.critic.epochs ?? undefined,
            miniBatchSize: c.critic.miniBatch ?? undefined,
            microBatchSize: c.critic.microBatch ?? undefined,
            lossAggMode: c.critic.lossAggMode ?? undefined,
          },
        }
      : {}),
  };
}

/**
 * The critic of a run that has one (verl's rule: critic.enable, else the gae estimator), on the CPU engine:
 * resumed from the checkpoint's critic state, else the critic model's decoder (the policy's model unless
 * --critic-model) with a fresh value head.
 */
async function makeCritic(
  c: TrainConfig,
  policy: PretrainedModel,
  resume: { startStep: number; resumeCritic: ValueTrainerState | null },
  log: (m: string) => void,
): Promise<CpuValueTrainer | null> {
  if (!usesCritic(c)) return null;
  const source = c.critic.model === null ? policy : await loadPretrained(c.critic.model);
  const saved = resume.resumeCritic;
  if (saved !== null && JSON.stringify(saved.config) !== JSON.stringify(source.config))
    throw new UsageError(
      `${c.out}'s checkpoint holds a critic of another shape than ${c.critic.model ?? c.model}: use the same --critic-model, or another --out`,
    );
  if (saved === null && resume.startStep > 0)
    log(`the critic starts afresh: the checkpoint of step ${resume.startStep} holds no critic state`);
  return createCpuValueTrainer({
    config: source.config,
    ...(saved !== null ? { params: saved.params, optimizer: saved.optimizer } : { policyParams: source.weights }),
    lr: c.critic.lr,
    weightDecay: c.critic.weightDecay,
    beta1: c.critic.betas[0],
    beta2: c.critic.betas[1],
    maxGradNorm: c.critic.gradClip,
    seed: c.seed,
  });
}

/** Runs (or resumes) the training the config describes, to its last step. */
export async function runTraining(config: TrainConfig, options: { log?: (m: string) => void; cwd?: string } = {}): Promise<TrainRunResult> {
  const started = performance.now();
  const log = options.log ?? ((m: string) => console.log(`[agl train] ${m}`));
  // Every input is checked before the folder is claimed (run.json): a mistake leaves nothing that refuses the corrected command.
  const train = readJsonl(config.data);
  const context = (await readModelInfo(config.model)).config.max_seq_len;
  const c = fitRowLimits(resolveSteps(config, train.length), context);
  const val = c.valData !== null ? readJsonl(c.valData) : null;
  const agent = await importAgent(c.agent, options.cwd ?? platform.cwd());
  const model = await loadPretrained(c.model);
  const { tokenizer } = model;
  if (tokenizer === null) throw new UsageError(`${c.model} has no tokenizer.json: training needs the model's tokenizer`);
  const weights = trainedWeights(c, model);
  await platform.files().mkdir(c.out);
  const store = await openRunStore(c);
  try {
    await claimRunFolder(c);
    await cancelLeftOpen(store, log);

    const { startStep, resume, resumeCritic } = await resumePoint(c, weights, log);
    if (startStep >= c.steps) log(`${c.out} already holds ${startStep} steps (--steps ${c.steps}): nothing to train`);

    const metricsPath = join(c.out, "metrics.jsonl");
    const reports = await reportsUpTo(metricsPath, startStep);
    const trainer = await makeTrainer(c, model, weights, resume, log);
    const critic = await makeCritic(c, model, { startStep, resumeCritic }, log);
    const { policy, engine } = await servedPolicy(c, model, tokenizer, weights, trainer, startStep);
    // selective optimisation: with an adapter, the agents not trained are served by the frozen base
    const server = new PolicyServer({ policy, agentMatch: weights.lora !== null ? c.agentMatch : null });
    if (c.agentMatch !== null && weights.lora === null)
      log(
        `--agent-match ${c.agentMatch}: only those agents' calls train, but every agent is served the trained model (full fine-tuning keeps no frozen base)`,
      );
    const svgPath = join(c.out, "reward-curve.svg");

    // The folder's record of the run so far, rewritten whole after each report (small), never half a line.
    const persist = async (): Promise<void> => {
      await writeAtomic(metricsPath, reports.map((r) => `${JSON.stringify(r)}\n`).join(""));
      await writeAtomic(svgPath, rewardCurve(reports, c.steps));
    };
    let pending: Promise<void> = Promise.resolve();
    // GRPO (the default) keeps its span names (grpo.step, ...); any other estimator runs as PPO (ppo.step, ...)
    const algorithm = new PPO(
      ppoOptionsOf(c, {
        trainer,
        policy,
        lora: weights.lora !== null,
        startStep,
        saveCheckpoint: checkpointSaver(c, weights),
        critic,
        onReport: (r) => {
          reports.push(r);
          pending = pending.then(persist);
        },
      }),
      c.advEstimator === "grpo" ? "grpo" : "ppo",
    );
    const lightning = new Trainer({
      algorithm,
      llmProxy: server,
      store,
      nRunners: c.runners,
      strategy: { type: "shm", main_thread: "algorithm" },
      runner: { type: "LitAgentRunner", poll_interval: 0.01, heartbeat_interval: 5 },
    });
    // started here (the algorithm leaves a running one alone) so that its address can be told: the model
    // being trained answers there, and its /metrics has the run's progress
    server.setStore(store);
    await server.start();
    log(
      `${model.name} (${model.architecture}), ${weights.description}: ${c.steps} steps x ${c.batch} tasks x ${c.group} rollouts, ` +
        `rows of ${c.maxPrompt} + ${c.maxResponse} tokens (context ${context}), trainer ${trainer.backend}, out ${c.out}, policy server ${server.endpoint}`,
    );
    try {
      if (startStep < c.steps) await lightning.fit(agent, train, { valDataset: val });
      await pending;
      await persist();
    } finally {
      await server.stop();
      (trainer as { destroy?: () => void }).destroy?.();
      (trainer as { close?: () => void }).close?.();
      critic?.close();
      engine.close?.();
    }
    return {
      startStep,
      reports,
      backend: trainer.backend,
      weightsDir: weights.dir,
      svgPath,
      seconds: (performance.now() - started) / 1000,
    };
  } finally {
    await store.close();
  }
}
