/**
 * Calc-X rollouts: GRPO steps of the multi-turn MCP calculator agent (examples/calc-x) run as `agl train` runs
 * them for the demo (examples/calc-x/train.ts): the policy server serving the committed SFT model with a LoRA
 * adapter (r 16) on the CPU engine, the runners in this process (shared-memory strategy), the store the policy
 * server records every model call in (the embedded libSQL file, as agl train, or the in-memory one), sampling
 * at temperature 0.7 with a sampling seed per rollout, the agent reaching the calculator over stdio MCP (one
 * server child shared by the runners).
 *
 * An untimed warm-up step of `--warmup` tasks comes first (the MCP server's spawn, JIT, the engines' worker
 * pools, the trainers' first updates). Then `--steps` steps of `--tasks` tasks x `--group` rollouts are timed,
 * each from its enqueue to its new adapter served, and added up:
 * - rates: rollouts, LLM calls and generated tokens per second of the rollout phases; turns, tool calls and
 *   reward per rollout;
 * - the steps' phases (wall): rollouts (enqueue to the last one finished), adapter (spans to triplets), batch
 *   building (padding, GRPO advantages), training (the trainer's log-prob and policy-step passes, the new
 *   adapter published);
 * - where the main thread's time goes, every runner, the policy server, the store and the algorithm sharing
 *   it (its event loop is busy ~99 % of the steps): a V8 CPU profile, each sample given to the first part
 *   whose code is on its stack (generation, training, store, MCP client, policy server, ...), idle included;
 *   beside it what timing wrappers measure: the engine's calls, every store call (a timing proxy around the
 *   store: calls and their latency per rollout), the MCP tool calls' round trips (the agent's `tool.<name>`
 *   spans) and the calculator child's CPU;
 * - CPU: this process (every thread: the engine's and trainer's pools), its main thread, the MCP child;
 * - both aggregation levels side by side: each step's rollouts batched and trained at each level, on a
 *   trainer per level, after the steps (the rows, the rows dropped for a prompt over the level's limit in the demo).
 *
 * Run: `npx tsx bench/calc-x.ts [--tasks 8] [--group 8] [--steps 3] [--runners 8] [--level trajectory]
 *      [--warmup 1] [--store libsql|memory] [--seed 0]` (or `npm run bench -- calc-x`).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { availableParallelism, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { calculatorServer, calcXAgent, STATS } from "../examples/calc-x/agent.ts";
import { trainTasks } from "../examples/calc-x/tasks.ts";
import { CALC_X_DEFAULTS, ROW_LIMITS } from "../examples/calc-x/train.ts";
import { buildTrainingBatch, type FinishedRollout, type Triplet } from "../src/adapter/index.ts";
import { LlmProxyTraceToTriplet } from "../src/adapter/proxy-triplet.ts";
import { algo } from "../src/algorithm/index.ts";
import { GRPO, type StepReport } from "../src/algorithm/grpo.ts";
import { grpoUpdate } from "../src/algorithm/grpo-step.ts";
import { type CommandSpec, parseFlags } from "../src/cli/flags.ts";
import { TrainConfigSchema } from "../src/cli/train-config.ts";
import { trainedWeights } from "../src/cli/train-weights.ts";
import { CpuTrainer } from "../src/cpu/trainer.ts";
import { createGenerationEngine } from "../src/engine/factory.ts";
import { loadPretrained } from "../src/model/hf/index.ts";
import type { GenerationEngine } from "../src/model/generation.ts";
import { PAD_ID } from "../src/model/tokenizer.ts";
import type { PolicyTrainer } from "../src/model/train-types.ts";
import { ModelPolicy } from "../src/proxy/policy.ts";
import { PolicyServer } from "../src/proxy/policy-server.ts";
import type { LightningStore } from "../src/store/base.ts";
import { InMemoryLightningStore, openStore } from "../src/store/index.ts";
import { Trainer } from "../src/trainer/index.ts";
import { AGL_ANNOTATION, AGL_OPERATION, LightningSpanAttributes } from "../src/types/semconv.ts";
import type { Span } from "../src/types/span.ts";
import { type CallFrame, type Part, splitProfile, startProfile } from "./_profile.ts";
import { cpuSeconds, mainThreadCpuSeconds } from "./_proc.ts";
import { epochSeconds, type Interval, timeMethods, totalSeconds } from "./_timeline.ts";

const MODEL = "examples/calc-x/model";

const COMMAND = {
  usage: "npx tsx bench/calc-x.ts [options]",
  about: "Calc-X rollouts through the policy server and the store, and where a GRPO step's time goes.",
  sections: [
    {
      title: "Options:",
      flags: [
        { name: "tasks", type: "number", integer: true, min: 1, value: "N", help: "tasks per step [8]" },
        { name: "group", type: "number", integer: true, min: 2, value: "N", help: `rollouts per task [${CALC_X_DEFAULTS.group}]` },
        { name: "steps", type: "number", integer: true, min: 1, value: "N", help: "timed steps [3]" },
        { name: "runners", type: "number", integer: true, min: 1, value: "N", help: `runners [${CALC_X_DEFAULTS.runners}]` },
        {
          name: "level",
          type: "string",
          choices: ["trajectory", "transition"],
          value: "L",
          help: `the steps' aggregation level [${CALC_X_DEFAULTS.level}]`,
        },
        { name: "warmup", type: "number", integer: true, min: 1, value: "N", help: "tasks of the untimed warm-up step [1]" },
        { name: "store", type: "string", choices: ["libsql", "memory"], value: "S", help: "libsql: a file, as agl train [libsql]" },
        { name: "seed", type: "number", integer: true, min: 0, value: "N", help: "seed of the tasks and the samples [0]" },
      ],
    },
  ],
} as const satisfies CommandSpec;

const { values: flags } = parseFlags(COMMAND, process.argv.slice(2));
const TASKS = flags.tasks ?? 8; // half the demo's batch: the bench's steps stay short
const GROUP = flags.group ?? CALC_X_DEFAULTS.group;
const STEPS = flags.steps ?? 3;
const RUNNERS = flags.runners ?? CALC_X_DEFAULTS.runners;
const LEVEL = (flags.level ?? CALC_X_DEFAULTS.level) as "trajectory" | "transition";
const WARMUP = flags.warmup ?? 1;
const STORE = flags.store ?? "libsql";
const SEED = flags.seed ?? 0;

const processCpu = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};

/** The parts of the main thread's profile: a sample goes to the first whose code is on its stack. */
const code =
  (...paths: string[]) =>
  (f: CallFrame): boolean =>
    paths.some((p) => f.url.includes(p));
const PARTS: Part[] = [
  { name: "generation (the engine)", matches: code("/src/cpu/generation.ts") },
  {
    name: "training (trainer, adapter published)",
    matches: (f) => code("/src/cpu/trainer.ts")(f) || (code("/src/proxy/policy.ts")(f) && f.functionName === "update"),
  },
  { name: "store", matches: code("/src/store/") },
  { name: "MCP client (tool calls)", matches: code("/@modelcontextprotocol/", "/examples/calc-x/mcp.ts") },
  { name: "policy server (HTTP, chat template, spans)", matches: code("/src/proxy/", "/node_modules/hono/", "/node_modules/@hono/") },
  { name: "openai client", matches: code("/node_modules/openai/") },
  { name: "adapter, batch building", matches: code("/src/adapter/", "/src/algorithm/grpo-step.ts") },
  { name: "agent (examples/calc-x)", matches: code("/examples/calc-x/") },
  {
    name: "runners, tracer, algorithm loop",
    matches: code("/src/runner/", "/src/tracer/", "/src/trainer/", "/src/algorithm/", "/@opentelemetry/"),
  },
  { name: "Node internals (HTTP server, fetch, streams)", matches: (f) => f.url.startsWith("node:") },
  { name: "garbage collection", matches: (f) => f.functionName === "(garbage collector)" },
  { name: "idle", matches: (f) => f.functionName === "(idle)" },
];

// ---------------------------------------------------------------------------------------------------
// What is recorded

/** Each engine call and the tokens it generated. (Its span overshoots the engine's work: the caller resumes
 * after the microtasks queued before it, other calls' generation among them; the profile has the work.) */
const generation: { at: Interval; tokens: number }[] = [];
/** The step trainer's passes and adapter publications; the comparison trainer's passes. */
const training: Interval[] = [];
const storeCalls: { method: string; at: Interval }[] = [];
/** Ends of the algorithm's waits for its rollouts: the last one in a step ends its rollout phase. */
const waitEnds: number[] = [];
/** When the step under way published its `main_llm` resource (its first store call). */
let stepStart = 0;
const adapterCalls: Interval[] = [];

interface StepRecord {
  report: StepReport;
  start: number;
  end: number;
  /** The triplets of each of the step's rollouts, as GRPO's adapter made them (the side-by-side updates reuse them). */
  adapted: Map<string, Triplet[]>;
}
const steps: StepRecord[] = [];
let adapting = new Map<string, Triplet[]>();

function timedEngine(inner: GenerationEngine): GenerationEngine {
  return {
    backend: inner.backend,
    close: () => inner.close?.(),
    async generate(config, params, requests, tokenizer, adapter) {
      const start = epochSeconds();
      const out = await inner.generate(config, params, requests, tokenizer, adapter);
      generation.push({ at: [start, epochSeconds()], tokens: out.reduce((n, g) => n + g.tokenIds.length, 0) });
      return out;
    },
  };
}

const timedStore = (inner: LightningStore): LightningStore =>
  timeMethods(inner, (method, start, end) => {
    if (method === "addResources") stepStart = start;
    if (method === "waitForRollouts") waitEnds.push(end);
    else if (method !== "close") storeCalls.push({ method, at: [start, end] });
  });

const PASSES = new Set(["logProbs", "policyStep", "getState"]);
const timedTrainer = (inner: PolicyTrainer, into: Interval[]): PolicyTrainer =>
  timeMethods(inner, (method, start, end) => {
    if (PASSES.has(method)) into.push([start, end]);
  });

const timedAdapter = (inner: LlmProxyTraceToTriplet) => ({
  adapt(spans: Span[]): Triplet[] {
    const start = epochSeconds();
    const triplets = inner.adapt(spans);
    adapterCalls.push([start, epochSeconds()]);
    if (spans.length > 0) adapting.set(spans[0]!.rollout_id, triplets);
    return triplets;
  },
});

const within = <T extends { at: Interval }>(xs: readonly T[], w: Interval): T[] => xs.filter((x) => x.at[0] >= w[0] && x.at[1] <= w[1]);
const inside = (xs: readonly Interval[], w: Interval): Interval[] => xs.filter(([a, b]) => a >= w[0] && b <= w[1]);

// ---------------------------------------------------------------------------------------------------
// The pieces, as agl train makes them (src/cli/train.ts)

const model = await loadPretrained(MODEL);
const dir = mkdtempSync(join(tmpdir(), "agl-calc-x-bench-"));
const config = TrainConfigSchema.parse({
  model: MODEL,
  agent: "examples/calc-x/agent.ts",
  data: "-",
  out: dir,
  device: "cpu",
  loraR: CALC_X_DEFAULTS.loraR,
  loraAlpha: CALC_X_DEFAULTS.loraAlpha,
  lr: CALC_X_DEFAULTS.lr,
  maxPrompt: ROW_LIMITS[LEVEL].maxPrompt,
  maxResponse: ROW_LIMITS[LEVEL].maxResponse,
  temperature: CALC_X_DEFAULTS.temperature,
  runners: RUNNERS,
  seed: SEED,
});
const weights = trainedWeights(config, model);
const newTrainer = () =>
  new CpuTrainer({ config: model.config, lr: config.lr, weightDecay: config.weightDecay, seed: SEED, ...weights.trainerOptions(null) });
const trainer = timedTrainer(newTrainer(), training);
type Level = "trajectory" | "transition";
const LEVELS: readonly Level[] = ["trajectory", "transition"];
/** A trainer per level for the side-by-side updates, and the passes each takes. */
const compared = Object.fromEntries(
  LEVELS.map((level) => {
    const passes: Interval[] = [];
    return [level, { trainer: timedTrainer(newTrainer(), passes), passes }];
  }),
) as Record<Level, { trainer: PolicyTrainer; passes: Interval[] }>;
const engine = timedEngine(await createGenerationEngine({ backend: "cpu" }));
const policy = new ModelPolicy({
  model: model.name,
  config: model.config,
  ...weights.policyWeights((await trainer.getState()).params),
  tokenizer: model.tokenizer!,
  engine,
  seed: SEED,
});
const publish = policy.update.bind(policy);
policy.update = (...args) => {
  const start = epochSeconds();
  publish(...args);
  training.push([start, epochSeconds()]);
};
const store = timedStore(STORE === "libsql" ? await openStore(`file:${join(dir, "store.db")}`) : new InMemoryLightningStore());
const server = new PolicyServer({ policy });
server.setStore(store);
const loss = { klLossCoef: config.klCoef, klLossType: config.klType, clipRatio: config.clipRatio };

/** GRPO on `tasks` for `n` steps, as agl train configures it (src/cli/train.ts). */
const grpo = (batchSize: number, n: number, warm: boolean) =>
  new GRPO({
    trainer,
    policy,
    steps: n,
    batchSize,
    nSamples: GROUP,
    lr: config.lr,
    loss,
    trackKl: true, // free with an adapter: agl train reports it
    maxPromptLength: ROW_LIMITS[LEVEL].maxPrompt,
    maxResponseLength: ROW_LIMITS[LEVEL].maxResponse,
    traceAggregator: { level: LEVEL },
    temperature: config.temperature,
    valEvery: 0,
    checkpointEvery: n,
    seed: SEED + (warm ? 1 : 0),
    progress: false,
    dropTiedGroups: !warm, // the warm-up always trains, so the trainer is warm too
    adapter: timedAdapter(new LlmProxyTraceToTriplet()),
    onReport: (r) => {
      if (r.kind !== "step") return;
      steps.push({ report: r, start: stepStart, end: epochSeconds(), adapted: adapting });
      adapting = new Map();
    },
  });

/** The rollouts GRPO adapted, with their data ids; how many of them did not succeed, how many took a second attempt. */
async function finishedRollouts(
  s: LightningStore,
  adapted: Map<string, Triplet[]>,
): Promise<{ finished: FinishedRollout[]; failed: number; retried: number }> {
  const finished: FinishedRollout[] = [];
  let failed = 0;
  let retried = 0;
  for (const [id, triplets] of adapted) {
    const r = await s.getRolloutById(id);
    if (r?.status !== "succeeded") failed++;
    if (((await s.getLatestAttempt(id))?.sequence_id ?? 1) > 1) retried++;
    finished.push({ rollout_id: id, data_id: String(r?.metadata?.data_id), triplets });
  }
  return { finished, failed, retried };
}

/** Rows of `finished` at `level` whose prompt is longer than the level's limit: the batch drops them (isDrop). */
function droppedRows(finished: FinishedRollout[], level: "trajectory" | "transition"): number {
  const { maxPrompt, maxResponse } = ROW_LIMITS[level];
  const b = buildTrainingBatch(finished, { maxPromptLength: maxPrompt, maxResponseLength: maxResponse, padTokenId: PAD_ID, level });
  return b.tensors.isDrop.reduce((n, d) => n + d, 0);
}

/** The batch and update of `finished` at `level` on that level's own trainer (seconds of each). */
async function levelUpdate(level: Level, finished: FinishedRollout[], warm: boolean) {
  const { trainer: t, passes } = compared[level];
  passes.length = 0;
  const start = epochSeconds();
  const u = await grpoUpdate(t, finished, {
    maxPromptLength: ROW_LIMITS[level].maxPrompt,
    maxResponseLength: ROW_LIMITS[level].maxResponse,
    traceAggregator: { level },
    loss,
    lr: config.lr,
    trackKl: true,
    dropTiedGroups: !warm,
  });
  const train = totalSeconds(passes); // one pass after another: no overlap
  return {
    dropped: droppedRows(finished, level),
    batch: epochSeconds() - start - train,
    train,
    rows: u.rows,
    trainedRows: u.trainedRows,
    tokens: u.trainedTokens,
    lossTokens: u.lossTokens,
  };
}

// ---------------------------------------------------------------------------------------------------
// One timed step, measured after the run

async function measureStep(s: LightningStore, rec: StepRecord) {
  const step: Interval = [rec.start, rec.end];
  const rolloutEnd = Math.max(...waitEnds.filter((t) => t >= step[0] && t <= step[1]));
  const adapterEnd = Math.max(...inside(adapterCalls, step).map(([, b]) => b));
  const trainSeconds = totalSeconds(inside(training, step));
  let turns = 0;
  let toolCalls = 0;
  const tools: Interval[] = [];
  for (const id of rec.adapted.keys()) {
    for (const span of (await s.querySpans(id, { attempt_id: "latest" })).items) {
      if (span.name === AGL_OPERATION && String(span.attributes[LightningSpanAttributes.OPERATION_NAME]).startsWith("tool."))
        tools.push([span.start_time ?? 0, span.end_time ?? 0]);
      else if (span.name === AGL_ANNOTATION && span.attributes[STATS.turns] !== undefined) {
        turns += Number(span.attributes[STATS.turns]);
        toolCalls += Number(span.attributes[STATS.toolCalls]);
      }
    }
  }
  const gen = within(generation, [step[0], rolloutEnd]);
  const { finished, failed, retried } = await finishedRollouts(s, rec.adapted);
  // both levels on the same rollouts, one after the other, in turns first
  const order = rec.report.step % 2 === 1 ? LEVELS : [...LEVELS].reverse();
  const levels = {} as Record<Level, Awaited<ReturnType<typeof levelUpdate>>>;
  for (const level of order) levels[level] = await levelUpdate(level, finished, false);
  return {
    rollouts: TASKS * GROUP,
    // a rollout without spans was not adapted: it failed before its first model call
    failed: failed + TASKS * GROUP - finished.length,
    retried,
    phases: {
      rollouts: rolloutEnd - step[0],
      adapter: adapterEnd - rolloutEnd,
      batch: step[1] - adapterEnd - trainSeconds,
      training: trainSeconds,
    },
    llmCalls: gen.length,
    tokens: gen.reduce((n, g) => n + g.tokens, 0),
    turns,
    toolCalls,
    tools,
    reward: rec.report.reward,
    store: within(storeCalls, step),
    levels,
  };
}
type StepFigures = Awaited<ReturnType<typeof measureStep>>;

// ---------------------------------------------------------------------------------------------------
// The run

const figures: StepFigures[] = [];
const cpu = { process: 0, main: 0, mcp: 0, loopBusy: 0 };
let profile: { name: string; seconds: number }[] = [];

const algorithm = algo(async ({ store: s }) => {
  const warm = grpo(WARMUP, 1, true);
  warm.setStore(s);
  warm.setLlmProxy(server);
  await warm.run(trainTasks(WARMUP, SEED + 1));
  const warmed = (await finishedRollouts(s, steps[0]!.adapted)).finished;
  for (const level of LEVELS) await levelUpdate(level, warmed, true);
  steps.length = 0;
  const mcpPid = [...calculatorServer.pids.values()][0];
  if (mcpPid === undefined) throw new Error("no MCP calculator child after the warm-up");
  const mcpCpu = () => cpuSeconds(mcpPid);
  const timed = grpo(TASKS, STEPS, false);
  timed.setStore(s);
  timed.setLlmProxy(server);
  const stopProfile = await startProfile();
  const cpu0 = { process: processCpu(), main: mainThreadCpuSeconds(process.pid), mcp: mcpCpu(), loop: performance.eventLoopUtilization() };
  await timed.run(trainTasks(TASKS * STEPS, SEED));
  Object.assign(cpu, {
    process: processCpu() - cpu0.process,
    main: mainThreadCpuSeconds(process.pid) - cpu0.main,
    mcp: mcpCpu() - cpu0.mcp,
    loopBusy: performance.eventLoopUtilization(cpu0.loop).utilization,
  });
  const { profile: samples, at } = await stopProfile();
  // the steps' windows only (not the GRPO run's start and end around them)
  profile = splitProfile(samples, PARTS, { windows: steps.map((r) => [at(r.start), at(r.end)] as const) });
  if ([...calculatorServer.pids.values()][0] !== mcpPid) throw new Error("the MCP calculator child was replaced during the timed steps");
  for (const rec of steps) figures.push(await measureStep(s, rec));
});

console.log(
  `calc-x: ${STEPS} steps x ${TASKS} tasks x ${GROUP} rollouts, ${RUNNERS} runners, ${STORE} store, level ${LEVEL}, ` +
    `LoRA r ${config.loraR}, temperature ${config.temperature}; ${availableParallelism()} CPUs, load ${loadavg()
      .map((x) => x.toFixed(2))
      .join(" ")}`,
);
// The bench holds a client of the shared MCP child, so it stays up (it closes after 5 s without rollouts)
// between the warm-up and the timed steps: its spawn is warm-up, not step time.
const held = await calculatorServer.open();
await server.start();
try {
  await new Trainer({
    store,
    algorithm,
    nRunners: RUNNERS,
    strategy: { type: "shm", main_thread: "algorithm" },
    runner: { type: "LitAgentRunner", poll_interval: 0.01, heartbeat_interval: 5 },
  }).fit(calcXAgent);
} finally {
  await server.stop();
  await calculatorServer.done(held, false);
  await calculatorServer.close();
  await store.close();
  engine.close?.();
  rmSync(dir, { recursive: true, force: true });
}

// ---------------------------------------------------------------------------------------------------
// The report: the timed steps added up

if (figures.length !== STEPS) throw new Error(`${figures.length} of ${STEPS} steps measured`);
const add = (f: (x: StepFigures) => number): number => figures.reduce((a, x) => a + f(x), 0);
const n = add((x) => x.rollouts);
const phases = {
  rollouts: add((x) => x.phases.rollouts),
  adapter: add((x) => x.phases.adapter),
  "batch building": add((x) => x.phases.batch),
  training: add((x) => x.phases.training),
};
const stepSeconds = Object.values(phases).reduce((a, b) => a + b, 0);
const llmCalls = add((x) => x.llmCalls);
const tokens = add((x) => x.tokens);
const failed = add((x) => x.failed);
const retried = add((x) => x.retried);
const tools = figures.flatMap((x) => x.tools);
const storeInSteps = figures.flatMap((x) => x.store);
const ms = (sec: number) => `${(1000 * sec).toFixed(1)} ms`;
const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
console.log(
  `rollouts: ${n} in ${phases.rollouts.toFixed(2)} s of rollout phases: ${(n / phases.rollouts).toFixed(2)} rollouts/s, ` +
    `${(llmCalls / phases.rollouts).toFixed(1)} LLM calls/s, ${(tokens / phases.rollouts).toFixed(0)} generated tokens/s; per rollout ` +
    `${(add((x) => x.turns) / n).toFixed(2)} turns, ${(add((x) => x.toolCalls) / n).toFixed(2)} tool calls (${(tools.length / n).toFixed(2)} run), ` +
    `${(tokens / llmCalls).toFixed(1)} tokens per call, reward ${(add((x) => x.reward) / STEPS).toFixed(3)}` +
    `${retried > 0 ? `; ${retried} retried (a second attempt samples anew)` : ""}${failed > 0 ? `; ${failed} FAILED` : ""}`,
);
console.log(
  `steps: ${stepSeconds.toFixed(2)} s, ${(n / stepSeconds).toFixed(2)} rollouts/s: ${Object.entries(phases)
    .map(([k, v]) => `${k} ${v.toFixed(2)} s (${pct(v / stepSeconds)})`)
    .join(", ")}`,
);
const profiled = profile.reduce((a, p) => a + p.seconds, 0);
const generating = profile.find((p) => p.name === "generation (the engine)")!.seconds;
const beside: Record<string, string> = {
  "generation (the engine)": `${ms(generating / llmCalls)} per call, ${(tokens / generating).toFixed(0)} tokens/s while generating`,
  "training (trainer, adapter published)": `trainer passes ${ms(phases.training / n)}/rollout`,
  store: `${(storeInSteps.length / n).toFixed(1)} calls/rollout, their latency summed ${ms(totalSeconds(storeInSteps.map((c) => c.at)) / n)}/rollout`,
  "MCP client (tool calls)": `round trip ${ms(totalSeconds(tools) / tools.length)} per call (spans), calculator child CPU ${ms(cpu.mcp / n)}/rollout`,
};
console.log(`main thread in the steps (V8 profile, ${profiled.toFixed(2)} s; event loop busy ${pct(cpu.loopBusy)}):`);
for (const p of profile)
  console.log(
    `  ${p.name.padEnd(42)} ${p.seconds.toFixed(2).padStart(6)} s ${pct(p.seconds / profiled).padStart(6)} ${ms(p.seconds / n).padStart(9)}/rollout` +
      (beside[p.name] ? `  | ${beside[p.name]}` : ""),
  );
const byMethod = new Map<string, Interval[]>();
for (const c of storeInSteps) byMethod.set(c.method, [...(byMethod.get(c.method) ?? []), c.at]);
console.log(
  `store calls per rollout (latency each): ${[...byMethod]
    .sort((a, b) => b[1].length - a[1].length)
    .slice(0, 8)
    .map(([m, xs]) => `${m} ${(xs.length / n).toFixed(1)} (${ms(totalSeconds(xs) / xs.length)})`)
    .join(", ")}`,
);
console.log(
  `CPU in the steps: process ${cpu.process.toFixed(2)} s (main thread ${cpu.main.toFixed(2)} s), MCP child ${cpu.mcp.toFixed(2)} s; ` +
    `${ms(cpu.process / n)} per rollout in the process, ${ms(cpu.main / n)} on its main thread -> ` +
    // what that CPU allows on two cores of its own: all of it on two, the main thread's on one
    `${(n / Math.max((cpu.process + cpu.mcp) / 2, cpu.main)).toFixed(1)} rollouts/s on 2 dedicated cores`,
);
const perStep = (f: (x: StepFigures) => number, digits = 1) => (add(f) / STEPS).toFixed(digits);
console.log("the levels side by side, per step (its rollouts; a trainer per level, one update each, after the steps):");
for (const level of LEVELS) {
  const at = (x: StepFigures) => x.levels[level];
  console.log(
    `  ${level.padEnd(10)} batch ${perStep((x) => at(x).batch, 2)} s, update ${perStep((x) => at(x).train, 2)} s; ` +
      `${perStep((x) => at(x).trainedRows)} of ${perStep((x) => at(x).rows)} rows trained ` +
      `(${perStep((x) => at(x).dropped)} dropped: prompt over ${ROW_LIMITS[level].maxPrompt}), ` +
      `${perStep((x) => at(x).tokens, 0)} tokens (${perStep((x) => at(x).lossTokens, 0)} in the loss)`,
  );
}
console.log(
  `load after: ${loadavg()
    .map((x) => x.toFixed(2))
    .join(" ")}`,
);
if (failed > 0) process.exitCode = 1;
