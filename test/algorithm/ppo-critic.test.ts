/**
 * The PPO step with a real critic (test/algorithm/ppo.test.ts checks the wiring with recording fakes): a
 * CPU policy and a CPU critic started from its weights, GAE over the same finished rollouts step after
 * step. With γ = λ = 1 the returns are the rewards to go, whatever the values, so the critic regresses
 * onto a fixed target and its loss must fall.
 */
import { describe, expect, it } from "vitest";
import type { FinishedRollout } from "../../src/adapter/index.ts";
import { ppoUpdate } from "../../src/algorithm/grpo-step.ts";
import { CpuTrainer, createCpuValueTrainer } from "../../src/cpu/index.ts";
import { initParams, parseModelConfig, TOKENIZER_VOCAB_SIZE } from "../../src/model/index.ts";

const config = parseModelConfig({
  vocab_size: TOKENIZER_VOCAB_SIZE,
  d_model: 16,
  n_layers: 1,
  n_heads: 2,
  n_kv_heads: 1,
  d_ff: 24,
  max_seq_len: 16,
  rope_theta: 10000,
  norm_eps: 1e-5,
  tie_embeddings: true,
});

const rollout = (id: string, dataId: string, response: number[], reward: number): FinishedRollout => ({
  rollout_id: id,
  data_id: dataId,
  triplets: [{ prompt: { token_ids: [1, 2, 3] }, response: { token_ids: response }, reward, metadata: {} }],
});

describe("ppoUpdate with the CPU critic (gae)", () => {
  it("reads the critic's values, trains it towards GAE's returns, and its loss falls step after step", async () => {
    const policyParams = initParams(config, 1);
    const policy = new CpuTrainer({ config, params: policyParams, lr: 1e-3 });
    const critic = createCpuValueTrainer({ config, policyParams, lr: 3e-3, weightDecay: 0 });
    const finished = [
      rollout("a", "t0", [5, 6, 7], 1),
      rollout("b", "t0", [8], 0),
      rollout("c", "t1", [9, 10], 0.5),
      rollout("d", "t1", [11, 12, 13], -1),
    ];
    const losses: number[] = [];
    for (let step = 0; step < 8; step++) {
      const before = await critic.getState();
      const u = await ppoUpdate(policy, finished, {
        maxPromptLength: 4,
        maxResponseLength: 3,
        advEstimator: "gae",
        critic: { trainer: critic },
      });
      expect(u.criticUpdates).toBe(1);
      expect(u.criticMetrics?.skipped).toBe(false);
      expect(u.verlMetrics["critic/vf_loss"]).toBe(u.criticMetrics?.vf_loss);
      // the values GAE read are the critic's before its update
      const again = createCpuValueTrainer({ config, params: before.params });
      expect(u.values).not.toBeNull();
      expect(Array.from(u.values!)).toEqual(Array.from(await again.values(u.batch.tensors)));
      again.close();
      losses.push(u.criticMetrics!.vf_loss);
    }
    // every row starts from the same prompt, so the first response token's value (read at the prompt's last
    // position) is one number for four returns (1, 0, 0.5, -1): 0.5 · 4 · their variance over 9 tokens is
    // a floor no critic goes below
    const floor = (0.5 * (0.875 ** 2 + 0.125 ** 2 + 0.375 ** 2 + 1.125 ** 2)) / 9;
    for (const l of losses) expect(l).toBeGreaterThan(floor);
    expect(losses[7] - floor).toBeLessThan(0.5 * (losses[0] - floor));
    policy.close();
    critic.close();
  });
});
