/**
 * The whole RL loop of the calc demo in one JavaScript realm, through the browser entry only: the
 * in-memory store, the policy server's app answered in-process (the agent's `openai` client sends its
 * requests there), runners as concurrent tasks (the shared-memory strategy), and GRPO on WebGPU (the
 * CPU Wasm engine where there is none). The page runs it in a Web Worker (worker.ts); Node runs the same
 * function for the side-by-side timing in docs/perf.md (bench.ts).
 */
import {
  batchFromTokens,
  createGenerationEngine,
  createPolicyTrainer,
  decodeModel,
  encodeModel,
  forward,
  GRPO,
  LORA_TARGETS,
  loadPeftAdapter,
  type GrpoReport,
  InMemoryLightningStore,
  InProcessPolicyServer,
  LlmProxyTraceToTriplet,
  ModelPolicy,
  PAD_ID,
  parseLoraConfig,
  peftAdapterFiles,
  type PolicyTrainer,
} from "../../src/browser.ts";
import { calcAgentWith, MAX_ANSWER_TOKENS } from "../calc/agent.ts";
import { calcTrainer } from "../calc/trainer.ts";
import { heldOutTasks, trainTasks, type CalcTask } from "../calc/tasks.ts";
import { TAB_DEFAULTS } from "./messages.ts";

export interface TabOptions {
  /** The starting checkpoint's `model.safetensors` bytes (the calc demo's SFT policy). */
  checkpoint: Uint8Array;
  /** Most training steps; Stop (`signal`) ends the run earlier. */
  steps: number;
  /** Tasks per step. */
  batch: number;
  /** Rollouts per task (the GRPO group). */
  n: number;
  lr: number;
  /** Held-out problems of each validation, and the steps between validations. */
  valTasks: number;
  valEvery: number;
  seed: number;
  /** Concurrent runners. */
  runners: number;
  /** 0 trains every weight; r > 0 trains a rank-r LoRA adapter (alpha 2r) on every projection, the base frozen. */
  loraRank: number;
  /** The trainer's backend: "auto" takes WebGPU where there is an adapter, else the CPU Wasm engine. */
  backend: "auto" | "webgpu" | "cpu";
  signal?: AbortSignal;
  onReport?: (report: GrpoReport) => void;
  /** After each step: a few of its rollouts, with their model calls. */
  onRollouts?: (rollouts: RolloutView[]) => void;
  /** After each step: the trained policy's files (`PolicyFiles`), kept for a download. */
  onCheckpoint?: (files: PolicyFiles, step: number) => void;
  /** Once the run's parts exist: its store (an export while the run goes on), trainer and policy. */
  onStart?: (run: TabRun) => void;
  log?: (line: string) => void;
}

/**
 * The trained policy as files, by name: our checkpoint (`model.safetensors`) when every weight trains, the
 * adapter in PEFT's layout (`adapter_config.json`, `adapter_model.safetensors`) when a LoRA adapter does.
 */
export type PolicyFiles = Record<string, Uint8Array>;

/** One model call of a rollout, as the policy server recorded it. */
export interface CallView {
  prompt: string;
  reply: string;
  /** The policy version that answered. */
  version: number;
  promptTokens: number;
  replyTokens: number;
}

export interface RolloutView {
  rolloutId: string;
  mode: string;
  status: string;
  reward: number | null;
  calls: CallView[];
}

/** The parts of a run in progress. */
export interface TabRun {
  store: InMemoryLightningStore;
  trainer: PolicyTrainer;
  policy: ModelPolicy;
}

export interface TabResult {
  reports: GrpoReport[];
  /** The trainer's backend and adapter, e.g. "webgpu (google swiftshader)". */
  backend: string;
  seconds: number;
  /** The trained policy's files. */
  files: PolicyFiles;
  /** The trained policy on the first held-out question's prompt: the logits `files` give, and the log-prob of
   * each next token as the trainer computed it from the weights it holds (on the tab's GPU where it trains there). */
  probe: { ids: number[]; logits: Float32Array; trainerLogProbs: Float32Array };
  store: InMemoryLightningStore;
}

const REWARD = "agentlightning.reward.0.value";

/** The latest `count` finished training rollouts with their model calls, newest first. */
export async function recentRollouts(store: InMemoryLightningStore, count: number): Promise<RolloutView[]> {
  const page = await store.queryRollouts({
    status_in: ["succeeded", "failed"],
    mode_in: ["train"],
    sort_by: "start_time",
    sort_order: "desc",
    limit: count,
  });
  const out: RolloutView[] = [];
  for (const r of page.items) {
    const spans = (await store.querySpans(r.rollout_id, { attempt_id: "latest" })).items;
    const calls = spans
      .filter((s) => s.name === "litellm_request")
      .map((s) => ({
        prompt: String(s.attributes["gen_ai.prompt.0.content"] ?? ""),
        reply: String(s.attributes["gen_ai.completion.0.content"] ?? ""),
        version: Number(s.attributes["lightning.policy.version"] ?? 0),
        promptTokens: (s.attributes.prompt_token_ids as number[] | undefined)?.length ?? 0,
        replyTokens: (s.attributes.response_token_ids as number[] | undefined)?.length ?? 0,
      }));
    const reward = spans.map((s) => s.attributes[REWARD]).find((v) => typeof v === "number");
    out.push({ rolloutId: r.rollout_id, mode: r.mode ?? "", status: r.status, reward: (reward as number | undefined) ?? null, calls });
  }
  return out;
}

/** Everything the store holds, as one JSON-ready object: resources, and each rollout with its attempts and spans. */
export async function exportStore(store: InMemoryLightningStore): Promise<Record<string, unknown>> {
  const rollouts = (await store.queryRollouts({ sort_by: "start_time", sort_order: "asc" })).items;
  return {
    format: "lightning-ts store export",
    resources: (await store.queryResources()).items,
    rollouts: await Promise.all(
      rollouts.map(async (r) => ({
        ...r,
        attempts: (await store.queryAttempts(r.rollout_id)).items,
        spans: (await store.querySpans(r.rollout_id)).items,
      })),
    ),
  };
}

/**
 * Logits at every position of `ids` of the policy `files` hold (an adapter on the `base` checkpoint's
 * weights): the plain-TS reference forward, the same numbers on any runtime.
 */
export async function probeLogits(files: PolicyFiles, base: Uint8Array, ids: number[]): Promise<Float32Array> {
  const input = batchFromTokens([{ prompt: ids.slice(0, -1), response: ids.slice(-1) }], { padId: PAD_ID });
  const full = files["model.safetensors"];
  if (full !== undefined) {
    const { config, params } = decodeModel(full);
    return forward(config, params, input).logits;
  }
  const { config, params } = decodeModel(base);
  return forward(config, params, input, { lora: await loadPeftAdapter(files, config) }).logits;
}

/** `ids` as a trainer's batch: the first token the prompt, the rest the response, so log-probs cover every next token. */
export function probeBatch(ids: number[]) {
  return batchFromTokens([{ prompt: ids.slice(0, 1), response: ids.slice(1) }], { padId: PAD_ID });
}

export async function runTab(options: Partial<TabOptions> & Pick<TabOptions, "checkpoint">): Promise<TabResult> {
  const o: TabOptions = { ...TAB_DEFAULTS, ...options };
  const log = o.log ?? (() => undefined);
  const t0 = performance.now();
  const start = decodeModel(o.checkpoint);
  const lora = o.loraRank > 0 ? parseLoraConfig({ r: o.loraRank, alpha: 2 * o.loraRank, targetModules: LORA_TARGETS }) : null;
  const trainer = await createPolicyTrainer({
    backend: o.backend,
    config: start.config,
    params: start.params,
    ...(lora ? { lora: { config: lora, base: start.params, seed: o.seed } } : {}),
    lr: o.lr,
    weightDecay: 0,
    warn: log,
  });
  const gpu = (trainer as { ctx?: { handle?: { report: { vendor: string; architecture: string } } } }).ctx;
  const report = gpu?.handle?.report;
  const backend = report ? `${trainer.backend} (${report.vendor} ${report.architecture})` : trainer.backend;
  // Generation: the CPU engine unless the adapter is a hardware one (a software adapter decodes slower than the CPU).
  const engine = await createGenerationEngine({ backend: "auto", context: gpu as never, log });
  // with an adapter, the policy serves the frozen base and the trainer's adapter, which each step replaces
  const adapter = lora ? { config: lora, params: (await trainer.getState()).params } : undefined;
  const policy = new ModelPolicy({ model: "calc-policy", config: start.config, params: start.params, lora: adapter, seed: o.seed, engine });
  const store = new InMemoryLightningStore();
  o.onStart?.({ store, trainer, policy });
  const server = new InProcessPolicyServer({ policy, store });
  let files: PolicyFiles | null = null;
  const heldOut = heldOutTasks(o.valTasks);
  const train: CalcTask[] = trainTasks(4096, o.seed + 17, heldOut);
  const grpo = new GRPO({
    trainer,
    policy,
    steps: o.steps,
    batchSize: o.batch,
    nSamples: o.n,
    valEvery: o.valEvery,
    seed: o.seed,
    lr: o.lr,
    maxPromptLength: start.config.max_seq_len - MAX_ANSWER_TOKENS,
    maxResponseLength: MAX_ANSWER_TOKENS,
    temperature: 1,
    valTemperature: 0,
    progress: false,
    adapter: new LlmProxyTraceToTriplet(),
    signal: o.signal,
    // every step's weights, read back whole from the trainer: what a download or a lost device leaves
    checkpointEvery: 1,
    saveCheckpoint: async (step, t) => {
      const state = await t.getState();
      files = state.lora
        ? peftAdapterFiles(state.config, { config: state.lora, params: state.params })
        : { "model.safetensors": encodeModel(state.config, state.params, step) };
      o.onCheckpoint?.(files, step);
    },
    onReport: (r) => {
      o.onReport?.(r);
      if (r.kind === "step" && o.onRollouts) void recentRollouts(store, 4).then(o.onRollouts);
    },
  });
  const lightning = calcTrainer({
    algorithm: grpo,
    llmProxy: server,
    store,
    runners: o.runners,
    heartbeatInterval: 0,
    watchdogIntervalSeconds: 0,
  });
  log(
    `training on ${backend}${lora ? `, a LoRA adapter of rank ${lora.r}` : ""}; ${o.batch} tasks x ${o.n} rollouts a step, ${o.runners} runners, ${heldOut.length} held-out tasks`,
  );
  try {
    await lightning.fit(calcAgentWith(server.fetch), train, { valDataset: heldOut });
    if (files === null) throw new Error("the run ended before its first step");
    const ids = policy.tokenizer.applyChatTemplate([{ role: "user", content: heldOut[0]!.question }], { addGenerationPrompt: true });
    return {
      reports: grpo.reports,
      backend,
      seconds: (performance.now() - t0) / 1000,
      files,
      probe: {
        ids,
        logits: await probeLogits(files, o.checkpoint, ids),
        trainerLogProbs: (await trainer.logProbs(probeBatch(ids))).log_probs,
      },
      store,
    };
  } finally {
    (trainer as { destroy?: () => void; close?: () => void }).destroy?.();
    (trainer as { close?: () => void }).close?.();
    engine.close?.();
  }
}
