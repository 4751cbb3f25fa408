/**
 * The whole RL loop of an agent (agents.ts: the calc demo, or the Calc-X tool agent) in one JavaScript realm, through the browser entry only: the
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
  type ModelConfig,
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
import { calcTrainer } from "../calc/trainer.ts";
import type { TabAgent } from "./agents.ts";
import { TAB_DEFAULTS } from "./messages.ts";

export interface TabOptions {
  /** The agent, the model it starts from and its tasks (agents.ts: `calcTabAgent`, `calcXTabAgent`). */
  agent: TabAgent;
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
  /** The prompt's last message: the question, or the tool results the agent sent back. */
  prompt: string;
  /** The reply's text, then each of its tool calls as `name(arguments)`. */
  reply: string;
  /** The reply's tool calls. */
  toolCalls: { name: string; arguments: string }[];
  /** The policy version that answered. */
  version: number;
  promptTokens: number;
  replyTokens: number;
}

/** One tool call the agent ran (an `agentlightning.operation` span `tool.<name>`): its arguments and result. */
export interface ToolView {
  name: string;
  input: Record<string, unknown>;
  output: string;
}

export interface RolloutView {
  rolloutId: string;
  mode: string;
  status: string;
  reward: number | null;
  calls: CallView[];
  tools: ToolView[];
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

const OPERATION_NAME = "agentlightning.operation.name";
const OPERATION_INPUT = "agentlightning.operation.input.";

/** The tool calls of a model call's reply (`gen_ai.completion.0.tool_calls.<j>.*`). */
function toolCallsOf(attributes: Record<string, unknown>): CallView["toolCalls"] {
  const out: CallView["toolCalls"] = [];
  for (let j = 0; `gen_ai.completion.0.tool_calls.${j}.name` in attributes; j++)
    out.push({
      name: String(attributes[`gen_ai.completion.0.tool_calls.${j}.name`]),
      arguments: String(attributes[`gen_ai.completion.0.tool_calls.${j}.arguments`] ?? ""),
    });
  return out;
}

/** The prompt's last message (`gen_ai.prompt.<i>.content`, the highest i). */
function lastPromptMessage(attributes: Record<string, unknown>): string {
  let i = 0;
  while (`gen_ai.prompt.${i + 1}.content` in attributes || `gen_ai.prompt.${i + 1}.role` in attributes) i++;
  return String(attributes[`gen_ai.prompt.${i}.content`] ?? "");
}

/** The latest `count` finished training rollouts with their model calls and tool calls, newest first. */
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
      .map((s) => {
        const toolCalls = toolCallsOf(s.attributes);
        const text = String(s.attributes["gen_ai.completion.0.content"] ?? "");
        return {
          prompt: lastPromptMessage(s.attributes),
          reply: [text, ...toolCalls.map((c) => `${c.name}(${c.arguments})`)].filter((x) => x !== "").join("\n"),
          toolCalls,
          version: Number(s.attributes["lightning.policy.version"] ?? 0),
          promptTokens: (s.attributes.prompt_token_ids as number[] | undefined)?.length ?? 0,
          replyTokens: (s.attributes.response_token_ids as number[] | undefined)?.length ?? 0,
        };
      });
    const tools = spans
      .filter((s) => String(s.attributes[OPERATION_NAME] ?? "").startsWith("tool."))
      .map((s) => ({
        name: String(s.attributes[OPERATION_NAME]).slice("tool.".length),
        input: Object.fromEntries(
          Object.entries(s.attributes)
            .filter(([k]) => k.startsWith(OPERATION_INPUT))
            .map(([k, v]) => [k.slice(OPERATION_INPUT.length), v]),
        ),
        output: String(s.attributes["agentlightning.operation.output"] ?? ""),
      }));
    const reward = spans.map((s) => s.attributes[REWARD]).find((v) => typeof v === "number");
    out.push({
      rolloutId: r.rollout_id,
      mode: r.mode ?? "",
      status: r.status,
      reward: (reward as number | undefined) ?? null,
      calls,
      tools,
    });
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
 * Logits at every position of `ids` of the policy `files` hold (an adapter on the `base` model's weights):
 * the plain-TS reference forward, the same numbers on any runtime.
 */
export async function probeLogits(
  files: PolicyFiles,
  base: { config: ModelConfig; params: TabAgent["model"]["params"] },
  ids: number[],
): Promise<Float32Array> {
  const input = batchFromTokens([{ prompt: ids.slice(0, -1), response: ids.slice(-1) }], { padId: PAD_ID });
  const full = files["model.safetensors"];
  if (full !== undefined) {
    const { config, params } = decodeModel(full);
    return forward(config, params, input).logits;
  }
  return forward(base.config, base.params, input, { lora: await loadPeftAdapter(files, base.config) }).logits;
}

/** `ids` as a trainer's batch: the first token the prompt, the rest the response, so log-probs cover every next token. */
export function probeBatch(ids: number[]) {
  return batchFromTokens([{ prompt: ids.slice(0, 1), response: ids.slice(1) }], { padId: PAD_ID });
}

export async function runTab(options: Partial<TabOptions> & Pick<TabOptions, "agent">): Promise<TabResult> {
  const o: TabOptions = { ...TAB_DEFAULTS, ...options };
  const log = o.log ?? (() => undefined);
  const t0 = performance.now();
  const start = o.agent.model;
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
  const policy = new ModelPolicy({
    model: start.name,
    config: start.config,
    params: start.params,
    tokenizer: start.tokenizer,
    lora: adapter,
    seed: o.seed,
    engine,
  });
  const store = new InMemoryLightningStore();
  o.onStart?.({ store, trainer, policy });
  const server = new InProcessPolicyServer({ policy, store });
  let files: PolicyFiles | null = null;
  const { train, heldOut } = o.agent.tasks(o.valTasks, o.seed);
  const grpo = new GRPO({
    trainer,
    policy,
    steps: o.steps,
    batchSize: o.batch,
    nSamples: o.n,
    valEvery: o.valEvery,
    seed: o.seed,
    lr: o.lr,
    maxPromptLength: o.agent.maxPromptLength,
    maxResponseLength: o.agent.maxResponseLength,
    traceAggregator: { level: o.agent.level },
    temperature: o.agent.temperature,
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
    `training on ${backend}${lora ? `, a LoRA adapter of rank ${lora.r}` : ""}; the ${o.agent.name} agent, ${o.batch} tasks x ${o.n} rollouts a step, ${o.runners} runners, ${heldOut.length} held-out tasks`,
  );
  try {
    await lightning.fit(o.agent.agent(server.fetch), train, { valDataset: heldOut });
    if (files === null) throw new Error("the run ended before its first step");
    const ids = o.agent.firstPrompt(heldOut[0], policy.tokenizer);
    return {
      reports: grpo.reports,
      backend,
      seconds: (performance.now() - t0) / 1000,
      files,
      probe: {
        ids,
        logits: await probeLogits(files, start, ids),
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
