/**
 * The PPO loop through the real stack on a tiny random model (runners, the openai-client agent, the policy
 * server, the in-memory store): ReMax's greedy baseline rollouts, the `ppo.step` spans with verl's metric
 * names, and the generations dump of every step.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, describe, expect, it } from "vitest";
import { LlmProxyTraceToTriplet } from "../../src/adapter/index.ts";
import { PPO } from "../../src/algorithm/ppo.ts";
import type { PpoOptions } from "../../src/algorithm/ppo-options.ts";
import type { ValueTrainer } from "../../src/model/value-types.ts";
import { CpuGenerationEngine } from "../../src/cpu/generation.ts";
import { CpuTrainer } from "../../src/cpu/index.ts";
import {
  initParams,
  type LogProbOptions,
  type LogProbsResult,
  MIN_VOCAB_SIZE,
  presetConfig,
  type TokenBatch,
} from "../../src/model/index.ts";
import { captureLogs } from "../../src/platform/log.ts";
import { ModelPolicy, PolicyServer } from "../../src/proxy/index.ts";
import { llmRollout } from "../../src/runner/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { Trainer } from "../../src/trainer/index.ts";
import type { LLM } from "../../src/types/index.ts";

const config = {
  ...presetConfig("tiny"),
  vocab_size: MIN_VOCAB_SIZE,
  d_model: 32,
  n_layers: 1,
  n_heads: 2,
  n_kv_heads: 1,
  d_ff: 64,
  max_seq_len: 32,
};
const TASKS = Array.from({ length: 4 }, (_, i) => ({ i, q: `${i}+${i}=` }));

// the reward is the first answer token's id modulo 3, over 2: it varies between samples
const agent = llmRollout(async (task: { q: string }, llm: LLM) => {
  const client = new OpenAI({ baseURL: llm.endpoint, apiKey: "none", maxRetries: 0 });
  const res = await client.chat.completions.create({
    model: llm.model,
    messages: [{ role: "user", content: task.q }],
    max_tokens: 4,
    temperature: (llm.sampling_parameters.temperature as number | undefined) ?? 0,
  });
  return (((res as unknown as { choices: { token_ids: number[] }[] }).choices[0].token_ids[0] ?? 0) % 3) / 2;
});

/**
 * A CPU trainer whose old log-prob pass comes out off by 1e-3 per token, as an engine that computed the same
 * pass twice and got two answers would give it (the reference pass, `baseOnly`, and the update are its own).
 */
class TwoAnswerTrainer extends CpuTrainer {
  override async logProbs(batch: TokenBatch, options: LogProbOptions = {}): Promise<LogProbsResult> {
    const r = await super.logProbs(batch, options);
    return options.baseOnly ? r : { ...r, log_probs: r.log_probs.map((x) => x + 1e-3) };
  }
}

/** PPO on `TASKS` (2 steps of 2 tasks x 3 samples) with `o`, through 2 runners. */
async function runPpo(o: Partial<PpoOptions>, lora = false, Cpu = CpuTrainer): Promise<{ ppo: PPO; store: InMemoryLightningStore }> {
  const params = initParams(config, 7);
  const trainer = lora
    ? new CpuTrainer({
        config,
        lora: { config: { r: 2, alpha: 4, targetModules: ["q_proj", "v_proj"] }, base: params, seed: 3 },
        lr: 1e-2,
        weightDecay: 0,
      })
    : new Cpu({ config, params, lr: 1e-2, weightDecay: 0 });
  const engine = new CpuGenerationEngine();
  const adapter = lora ? await trainer.getState() : null;
  const policy = new ModelPolicy({
    model: "m",
    config,
    params,
    seed: 0,
    engine,
    ...(adapter?.lora ? { lora: { config: adapter.lora, params: adapter.params } } : {}),
  });
  const store = new InMemoryLightningStore();
  const ppo = new PPO({
    trainer,
    policy,
    steps: 2,
    batchSize: 2,
    nSamples: 3,
    valEvery: 0,
    maxPromptLength: 24,
    maxResponseLength: 4,
    progress: false,
    ...o,
  });
  const lightning = new Trainer({
    algorithm: ppo,
    llmProxy: new PolicyServer({ policy }),
    store,
    nRunners: 2,
    strategy: { type: "shm", main_thread: "algorithm" },
    runner: { type: "LitAgentRunner", poll_interval: 0.005, heartbeat_interval: 5 },
  });
  try {
    await lightning.fit(agent, TASKS);
  } finally {
    trainer.close();
    engine.close();
  }
  return { ppo, store };
}

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe("the PPO loop", () => {
  it("one update per step on the CPU trainer: kl is exactly 0; an engine that answers twice differently is warned of", {
    timeout: 120_000,
  }, async () => {
    const logs = captureLogs();
    try {
      const { ppo } = await runPpo({});
      expect(ppo.steps.map((r) => [r.updates, r.kl])).toEqual([
        [1, 0],
        [1, 0],
      ]);
      expect(logs.text()).not.toContain("gave other log-probs than the old log-prob pass");
      const glitchy = await runPpo({}, false, TwoAnswerTrainer);
      expect(glitchy.ppo.steps.every((r) => r.updates === 1 && r.kl !== 0)).toBe(true);
      const warned = logs.records.filter((r) => r.level === "warning" && r.message.includes("gave other log-probs than the old"));
      expect(warned.map((r) => r.message.match(/step (\d+)/)?.[1])).toEqual(["1", "2"]);
    } finally {
      logs.stop();
    }
  });

  it("remax: runs one greedy rollout per task as each step's baseline, records ppo.step spans and dumps every step", {
    timeout: 120_000,
  }, async () => {
    const dir = await mkdtemp(join(tmpdir(), "ppo-loop-"));
    dirs.push(dir);
    const { ppo, store } = await runPpo({ advEstimator: "remax", rolloutDataDir: `${dir}/gens` });
    const rollouts = (await store.queryRollouts({})).items.filter((r) => r.mode === "train");
    const dataId = (r: (typeof rollouts)[number]) => String((r.metadata as { data_id: string }).data_id);
    const greedy = rollouts.filter((r) => dataId(r).includes("-greedy-"));
    expect(greedy.map(dataId).sort()).toEqual(["s1-greedy-0", "s1-greedy-1", "s2-greedy-0", "s2-greedy-1"]);
    // each greedy rollout ran at temperature 0
    for (const r of greedy) {
      const resources = await store.getResourcesById(r.resources_id!);
      expect((resources!.resources.main_llm as LLM).sampling_parameters.temperature).toBe(0);
    }
    expect(rollouts.length - greedy.length).toBe(2 * 2 * 3);

    // the dump: one line per row; each row's advantage is its reward minus its task's greedy reward
    const adapter = new LlmProxyTraceToTriplet();
    const greedyReward = new Map<string, number>();
    for (const r of greedy) {
      const triplets = adapter.adapt((await store.querySpans(r.rollout_id)).items);
      greedyReward.set(dataId(r).replace("-greedy", ""), triplets.at(-1)?.reward ?? 0);
    }
    for (const step of [1, 2]) {
      const lines = (await readFile(`${dir}/gens/${step}.jsonl`, "utf8"))
        .trimEnd()
        .split("\n")
        .map((l) => JSON.parse(l));
      expect(lines).toHaveLength(ppo.steps[step - 1].rows);
      for (const l of lines) {
        expect(l.step).toBe(step);
        expect(l.output.length).toBeGreaterThan(0);
        expect(l.response_ids.length).toBe(l.advantages.length);
        const b = greedyReward.get(l.data_id)!;
        for (const a of l.advantages) expect(a).toBeCloseTo(l.score - b, 6);
      }
    }

    // the step spans carry the report's fields and verl's names
    const metrics = (await store.queryRollouts({})).items.filter((r) => (r.metadata as Record<string, unknown>)?.kind === "ppo-metrics");
    expect(metrics).toHaveLength(1);
    const spans = (await store.querySpans(metrics[0].rollout_id)).items.filter((s) => s.name === "ppo.step");
    expect(spans.map((s) => s.attributes["ppo.reward"])).toEqual(ppo.steps.map((s) => s.reward));
    expect(spans.map((s) => s.attributes["critic/score/mean"])).toEqual(ppo.steps.map((s) => s.metrics["critic/score/mean"]));
    for (const s of ppo.steps) expect(s.metrics["critic/score/mean"]).toBeCloseTo(s.reward, 6);
  });

  it("KL in the reward with the adaptive controller: β moves between steps by the step's KL and rows", { timeout: 120_000 }, async () => {
    const klCtrl = { type: "adaptive" as const, klCoef: 0.01, targetKl: 0.001, horizon: 10 };
    const { ppo } = await runPpo({ advEstimator: "rloo", useKlInReward: true, klPenalty: "low_var_kl", klCtrl }, true);
    const [first, second] = ppo.steps.map((s) => s.metrics);
    expect(first["actor/reward_kl_penalty_coeff"]).toBe(0.01);
    // the adapter starts as the identity: no KL to the base yet, error clipped to −0.2, 6 rows
    expect(first["actor/reward_kl_penalty"]).toBe(0);
    expect(second["actor/reward_kl_penalty_coeff"]).toBeCloseTo(0.01 * (1 - (0.2 * 6) / 10), 12);
    // one update later the policy has moved away from its base
    expect(second["actor/reward_kl_penalty"]).toBeGreaterThan(0);
    const e = Math.min(Math.max(second["actor/reward_kl_penalty"] / 0.001 - 1, -0.2), 0.2);
    expect(ppo.klCtrl.value).toBeCloseTo(second["actor/reward_kl_penalty_coeff"] * (1 + (e * 6) / 10), 12);
  });

  it("critic warm-up: the first criticWarmup steps train the critic only, then the actor", { timeout: 120_000 }, async () => {
    const calls: string[] = [];
    const critic: ValueTrainer = {
      config,
      backend: "cpu",
      values: async (b) => (calls.push("values"), new Float32Array(b.n * b.R).fill(0.25)),
      valueStep: async (b) => (
        calls.push("valueStep"), { vf_loss: 1, vf_clipfrac: 0, vpred_mean: 0.25, grad_norm: 1, tokens: b.n, skipped: false, step: 1 }
      ),
      getState: () => Promise.reject(new Error("not used")),
      setState: () => Promise.reject(new Error("not used")),
    };
    const { ppo } = await runPpo({ advEstimator: "gae", critic: { trainer: critic }, criticWarmup: 1 });
    const [warm, trained] = ppo.steps;
    expect([warm.updates, warm.version, warm.metrics["critic/vf_loss"]]).toEqual([0, 0, 1]);
    expect(warm.metrics["actor/pg_loss"]).toBeUndefined();
    expect(trained.updates).toBe(1);
    expect(trained.version).toBe(1);
    expect(calls).toEqual(["values", "valueStep", "values", "valueStep"]);
  });
});
