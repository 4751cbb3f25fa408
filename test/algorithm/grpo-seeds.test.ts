/**
 * Two short GRPO runs with the same seed give the same samples, rewards and weights although their
 * runners' calls reach the policy server in opposite orders: each rollout carries its sampler seed.
 */
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { LlmProxyTraceToTriplet } from "../../src/adapter/index.ts";
import { GRPO } from "../../src/algorithm/grpo.ts";
import { CpuTrainer } from "../../src/cpu/index.ts";
import { initParams, MIN_VOCAB_SIZE, presetConfig } from "../../src/model/index.ts";
import { ModelPolicy, PolicyServer } from "../../src/proxy/index.ts";
import { CpuGenerationEngine } from "../../src/cpu/generation.ts";
import { llmRollout } from "../../src/runner/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { Trainer } from "../../src/trainer/index.ts";
import type { LLM } from "../../src/types/index.ts";

// every id the model can sample is one the byte tokenizer decodes
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
const TASKS = Array.from({ length: 8 }, (_, i) => ({ i, q: `${i}+${i}=` }));

interface Run {
  /** Token ids of every sampled answer, by data id, in rollout order within a group. */
  samples: Record<string, number[][]>;
  rewards: number[];
  params: Float32Array;
}

/** GRPO on `TASKS` with 4 runners; each agent waits `delayMs(task)` before its call. */
async function run(delayMs: (task: { i: number }) => number): Promise<Run> {
  const params = initParams(config, 7);
  const trainer = new CpuTrainer({ config, params, lr: 1e-2, weightDecay: 0 });
  const engine = new CpuGenerationEngine();
  const policy = new ModelPolicy({ model: "m", config, params, seed: 0, engine });
  const store = new InMemoryLightningStore();
  const grpo = new GRPO({
    trainer,
    policy,
    steps: 2,
    batchSize: 4,
    nSamples: 4,
    valEvery: 0,
    maxPromptLength: 24,
    maxResponseLength: 6,
    progress: false,
  });
  const agent = llmRollout(async (task: { i: number; q: string }, llm: LLM) => {
    await new Promise((r) => setTimeout(r, delayMs(task)));
    const client = new OpenAI({ baseURL: llm.endpoint, apiKey: "none", maxRetries: 0 });
    const res = await client.chat.completions.create({
      model: llm.model,
      messages: [{ role: "user", content: task.q }],
      max_tokens: 6,
      temperature: (llm.sampling_parameters.temperature as number | undefined) ?? 0,
    });
    // a reward that varies within a group, so the steps change the weights
    return ((res as unknown as { choices: { token_ids: number[] }[] }).choices[0].token_ids[0] ?? 0) % 2;
  });
  const lightning = new Trainer({
    algorithm: grpo,
    llmProxy: new PolicyServer({ policy }),
    store,
    nRunners: 4,
    strategy: { type: "shm", main_thread: "algorithm" },
    runner: { type: "LitAgentRunner", poll_interval: 0.005, heartbeat_interval: 5 },
  });
  try {
    await lightning.fit(agent, TASKS);
  } finally {
    trainer.close();
    engine.close();
  }
  const samples: Record<string, number[][]> = {};
  const rollouts = (await store.queryRollouts({})).items.filter((r) => r.mode === "train");
  for (const r of rollouts.sort((a, b) => a.rollout_id.localeCompare(b.rollout_id))) {
    const id = String((r.metadata as { data_id: string }).data_id);
    const triplets = new LlmProxyTraceToTriplet().adapt((await store.querySpans(r.rollout_id)).items);
    (samples[id] ??= []).push(triplets.flatMap((t) => t.response.token_ids as number[]));
  }
  const params_ = (await trainer.getState()).params;
  return { samples, rewards: grpo.steps.map((s) => s.reward), params: params_ };
}

describe("GRPO with a seed", () => {
  it("repeats its samples, rewards and weights when the runners' calls arrive in another order", { timeout: 120_000 }, async () => {
    const first = await run((t) => 2 * t.i);
    const second = await run((t) => 2 * (TASKS.length - t.i));
    expect(Object.keys(first.samples)).toHaveLength(8);
    expect(Object.values(first.samples).every((group) => group.length === 4 && group.every((ids) => ids.length > 0))).toBe(true);
    expect(
      new Set(
        Object.values(first.samples)
          .flat()
          .map((ids) => ids.join(",")),
      ).size,
    ).toBeGreaterThan(16);
    expect(second.samples).toEqual(first.samples);
    expect(second.rewards).toEqual(first.rewards);
    expect(Buffer.from(second.params.buffer).equals(Buffer.from(first.params.buffer))).toBe(true);
    // the steps did train
    expect(Buffer.from(first.params.buffer).equals(Buffer.from(initParams(config, 7).buffer))).toBe(false);
  });
});
