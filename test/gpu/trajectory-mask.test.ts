/**
 * Trajectory rows on the WebGPU trainer: a multi-turn rollout merged by the batch builder into one row whose
 * loss mask has 0s between the model's turns (tool results, chat scaffolding). The gradient of a PPO step
 * (full model and LoRA) equals the CPU reference's on that row, and advantages or old log-probs on the
 * masked tokens change nothing, while the same change on the model's tokens does.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildTrainingBatch } from "../../src/adapter/index.ts";
import { GpuContext } from "../../src/gpu/context.ts";
import { GpuPolicyTrainer } from "../../src/gpu/trainer.ts";
import type { ModelConfig } from "../../src/model/config.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import { loraParamCount, type LoraConfig } from "../../src/model/lora.ts";
import type { PolicyStepOptions, TokenBatch } from "../../src/model/train-types.ts";
import { maxRelError, noGpu, randn } from "./gpu-env.ts";
import { referenceGradients } from "./policy-reference.ts";

const config: ModelConfig = {
  vocab_size: 37,
  d_model: 24,
  n_layers: 2,
  n_heads: 4,
  n_kv_heads: 2,
  d_ff: 40,
  max_seq_len: 64,
  rope_theta: 10000,
  norm_eps: 1e-5,
  tie_embeddings: true,
};
const LORA: LoraConfig = { r: 2, alpha: 4, targetModules: ["q_proj", "v_proj", "down_proj"] };

/** Two rollouts of three calls each, every call's prompt extending the previous prompt + response. */
function trajectoryBatch(): TokenBatch {
  const t = (prompt: number[], response: number[], reward: number | null) => ({
    prompt: { token_ids: prompt },
    response: { token_ids: response },
    reward,
    metadata: {},
  });
  const rollout = (id: string, a: number[], b: number[], c: number[], reward: number) => {
    const p0 = [1, 2, 3, 4];
    const p1 = [...p0, ...a, 30, 31, 32];
    const p2 = [...p1, ...b, 33, 34];
    return { rollout_id: id, data_id: "d", triplets: [t(p0, a, null), t(p1, b, null), t(p2, c, reward)] };
  };
  const b = buildTrainingBatch([rollout("r1", [5, 6], [7, 8, 9], [10], 1), rollout("r2", [11], [12, 13], [14, 15, 16], 0)], {
    level: "trajectory",
    maxPromptLength: 6,
    maxResponseLength: 18,
  });
  expect(b.tensors.n).toBe(2);
  return b.tensors;
}

describe.skipIf(noGpu)("trajectory rows on the WebGPU trainer", { timeout: 180_000 }, () => {
  let ctx: GpuContext;
  beforeAll(async () => {
    ctx = await GpuContext.create();
  });
  afterAll(() => ctx?.destroy());

  it.each([false, true])("lora=%s: the gradient is the CPU reference's; masked tokens change nothing", async (lora) => {
    const batch = trajectoryBatch();
    const mask = batch.responseMask!;
    expect(Array.from(mask.subarray(0, 12))).toEqual([1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 0]);
    const rng = new Rng(5);
    const base = initParams(config, 3);
    const adapter = randn(rng, loraParamCount(config, LORA), 0.15);
    const gpu = await GpuPolicyTrainer.create({
      config,
      ...(lora ? { lora: { config: LORA, base, adapter } } : { params: base }),
      context: ctx,
    });
    try {
      const n = batch.n * batch.R;
      const { log_probs } = await gpu.logProbs(batch);
      const old = log_probs.map((x) => x + 0.3 * rng.normal());
      const adv = Float32Array.from({ length: n }, (_, k) => (mask[k] ? (k < batch.R ? 1 : -1) : 0));
      const options: PolicyStepOptions = { lr: 0, microBatchSize: 1 };
      const gradients = async (a: Float32Array, o: Float32Array) => {
        await gpu.policyStep(batch, a, o, options);
        return gpu.lastGradients();
      };
      const clean = await gradients(adv, old);
      const want = referenceGradients(config, base, batch, adv, old, options, lora ? { config: LORA, adapter } : undefined);
      expect(maxRelError(clean, want.grads)).toBeLessThan(1e-4);
      const junk = (where: 0 | 1) => {
        const a = adv.slice();
        const o = old.slice();
        for (let k = 0; k < n; k++)
          if (mask[k] === where) {
            a[k] = where ? 3 : 7;
            o[k] = -9;
          }
        return [a, o] as const;
      };
      expect(Array.from(await gradients(...junk(0)))).toEqual(Array.from(clean));
      expect(maxRelError(await gradients(...junk(1)), clean)).toBeGreaterThan(1e-3);
    } finally {
      gpu.destroy();
    }
  });
});
