/**
 * What the browser tests run twice, once in Node and once in a Chromium page (bundled from this file by
 * page.test.ts), all through the browser entry: the results must agree. Plain data in and out, so a
 * result crosses `page.evaluate` unchanged.
 */
import {
  type FinishedRollout,
  GpuDeviceLostError,
  GpuPolicyTrainer,
  grpoUpdate,
  batchFromTokens,
  PAD_ID,
  LightningStoreClient,
  libraryKernels,
  type ModelConfig,
  Rng,
  spanFromAttributes,
  StoreHttpError,
} from "../../src/browser.ts";

/** The Wasm core on fixed inputs: GRPO advantages (with and without the std), three KL kinds. */
export function wasmNumbers(): Record<string, number[]> {
  const k = libraryKernels();
  const rng = new Rng(5);
  const B = 6;
  const T = 5;
  const rewards = new Float32Array(B * T);
  const mask = new Float32Array(B * T);
  for (let i = 0; i < B; i++) {
    const len = 2 + (i % 4);
    for (let t = 0; t < len; t++) mask[i * T + t] = 1;
    rewards[i * T + len - 1] = rng.uniform();
  }
  const groups = Int32Array.from([0, 0, 0, 1, 1, 1]);
  const logp = Float32Array.from({ length: B * T }, () => -rng.uniform() * 3);
  const ref = Float32Array.from({ length: B * T }, () => -rng.uniform() * 3);
  return {
    grpo: [...k.grpo({ rewards, mask, B, T, groups }, true).advantages],
    grpoNoStd: [...k.grpo({ rewards, mask, B, T, groups }, false).advantages],
    k1: [...k.klPenalty(logp, ref, "k1")],
    k2: [...k.klPenalty(logp, ref, "k2")],
    k3: [...k.klPenalty(logp, ref, "k3")],
  };
}

export const TINY: ModelConfig = {
  vocab_size: 260, // the byte tokenizer's 256 bytes and specials: the batch pads with PAD_ID (258)
  d_model: 24,
  n_layers: 2,
  n_heads: 4,
  n_kv_heads: 2,
  d_ff: 40,
  max_seq_len: 32,
  rope_theta: 10000,
  norm_eps: 1e-5,
  tie_embeddings: true,
};

/** Two tasks, four rollouts each, rewards spread so no group is tied; token ids from a seeded generator. */
export function syntheticRollouts(seed = 9, vocab = TINY.vocab_size): FinishedRollout[] {
  const rng = new Rng(seed);
  const ids = (n: number) => Array.from({ length: n }, () => 1 + (rng.nextU32() % (vocab - 5)));
  return Array.from({ length: 8 }, (_, i) => ({
    rollout_id: `ro-${i}`,
    data_id: `task-${i % 2}`,
    triplets: [{ prompt: { token_ids: ids(3 + (i % 3)) }, response: { token_ids: ids(2 + (i % 4)) }, reward: (i * 7) % 5, metadata: {} }],
  }));
}

export interface GpuStepResult {
  adapter: string;
  software: boolean;
  loss: number;
  gradNorm: number;
  trainedRows: number;
  tokens: number;
  tokensPerSecond: number;
  /** Every 97th parameter after the step, and the sum of all. */
  sample: number[];
  sum: number;
}

/** One GRPO update (batch and advantages in the Wasm core) on this runtime's WebGPU device. */
export async function gpuStep(): Promise<GpuStepResult> {
  const trainer = await GpuPolicyTrainer.create({ config: TINY, seed: 3, lr: 1e-2 });
  try {
    const u = await grpoUpdate(trainer, syntheticRollouts(), { maxPromptLength: 8, maxResponseLength: 8 });
    const { params } = await trainer.getState();
    let sum = 0;
    for (const p of params) sum += p;
    const report = trainer.ctx.handle?.report;
    return {
      adapter: `${report?.vendor} ${report?.architecture} ${report?.description}`.trim(),
      software: report?.software ?? false,
      loss: u.metrics?.loss ?? Number.NaN,
      gradNorm: u.metrics?.grad_norm ?? Number.NaN,
      trainedRows: u.trainedRows,
      tokens: u.metrics?.tokens ?? 0,
      tokensPerSecond: u.metrics?.tokens_per_second ?? 0,
      sample: [...params.filter((_, i) => i % 97 === 0)],
      sum,
    };
  } finally {
    trainer.destroy();
  }
}

/**
 * A store conformance subset through LightningStoreClient: enqueue, claim, spans, finish, wait, query,
 * resources, statistics, a missing rollout, and a refused token. Returns what it saw with the ids taken out.
 */
export async function clientRun(url: string, token: string): Promise<Record<string, unknown>> {
  const client = new LightningStoreClient(url, { token, retryDelays: [], healthRetryDelays: [] });
  const seen: Record<string, unknown> = {};
  seen.health = await client.health();
  const queued = await client.enqueueRollout({ question: "1+1" }, { mode: "train", metadata: { from: "page" } });
  seen.queued = [queued.status, queued.mode, queued.input, queued.metadata];
  const claimed = await client.dequeueRollout({ worker_id: "page-worker" });
  if (!claimed) throw new Error("dequeueRollout returned nothing");
  seen.claimed = [claimed.rollout_id === queued.rollout_id, claimed.status, claimed.attempt.worker_id];
  const span = spanFromAttributes({
    rollout_id: claimed.rollout_id,
    attempt_id: claimed.attempt.attempt_id,
    name: "agentlightning.reward",
    attributes: { "agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 1 },
  });
  const finished = await client.finishAttempt({
    rollout_id: claimed.rollout_id,
    attempt_id: claimed.attempt.attempt_id,
    spans: [{ ...span, sequence_id: null as unknown as number }],
    attempt: { status: "succeeded" },
  });
  seen.finished = [finished.sequence_ids, finished.attempt.status, finished.next];
  const done = await client.waitForRollouts({ rollout_ids: [queued.rollout_id], timeout: 5 });
  seen.waited = done.map((r) => r.status);
  const spans = (await client.querySpans(queued.rollout_id)).items;
  seen.spans = spans.map((s) => [s.name, s.sequence_id, s.attributes["agentlightning.reward.0.value"]]);
  const resources = await client.addResources({ prompt: { resource_type: "prompt_template", template: "Q: {q}", engine: "f-string" } });
  const latest = await client.getLatestResources();
  seen.resources = [latest?.resources_id === resources.resources_id, latest?.resources];
  seen.rollouts = (await client.queryRollouts({ status_in: ["succeeded"] })).items.length;
  seen.missing = await client.getRolloutById("ro-does-not-exist");
  const stats = await client.statistics();
  seen.statistics = [stats.total_rollouts, stats.total_spans];
  await client.close();
  const refused = new LightningStoreClient(url, { token: `${token}-wrong`, retryDelays: [], healthRetryDelays: [] });
  try {
    await refused.queryRollouts();
    seen.refused = "accepted";
  } catch (e) {
    seen.refused = [e instanceof StoreHttpError, (e as StoreHttpError).status];
  }
  await refused.close();
  return seen;
}

/**
 * Loses the trainer's device mid-run (destroyed under it: WebGPU then resolves `device.lost` as a driver
 * reset would) and reports how each later call fails.
 */
export async function deviceLoss(): Promise<{ stepBefore: boolean; errors: string[] }> {
  const trainer = await GpuPolicyTrainer.create({ config: TINY, seed: 3, lr: 1e-2 });
  // A forward pass works before the loss (forward only: each new device compiles its kernels again).
  const before = await trainer.logProbs(batchFromTokens([{ prompt: [1, 2, 3], response: [4, 5] }], { padId: PAD_ID }));
  trainer.ctx.device.destroy();
  await trainer.ctx.device.lost;
  const errors: string[] = [];
  const describe = (e: unknown) =>
    errors.push(e instanceof GpuDeviceLostError ? `${e.name} ${e.reason}` : `not a GpuDeviceLostError: ${String(e)}`);
  await grpoUpdate(trainer, syntheticRollouts(), { maxPromptLength: 8, maxResponseLength: 8 }).catch(describe);
  await trainer.getState().catch(describe);
  await GpuPolicyTrainer.create({ config: TINY, context: trainer.ctx }).catch(describe);
  trainer.destroy();
  return { stepBefore: before.log_probs.every(Number.isFinite), errors };
}
