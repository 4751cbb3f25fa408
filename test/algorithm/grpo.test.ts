/** GRPO's own pieces; the whole loop runs in test/demo/calc.test.ts. */
import { describe, expect, it } from "vitest";
import { combineMetrics, GRPO, selectRows } from "../../src/algorithm/grpo.ts";
import { CpuTrainer } from "../../src/cpu/index.ts";
import { batchFromTokens, initParams, PAD_ID, presetConfig, type StepMetrics } from "../../src/model/index.ts";
import { ModelPolicy } from "../../src/proxy/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";

const config = { ...presetConfig("tiny"), d_model: 32, n_layers: 1, n_heads: 2, n_kv_heads: 1, d_ff: 64, max_seq_len: 32 };

describe("selectRows", () => {
  it("keeps exactly the chosen rows of every tensor, in the order given", () => {
    const rows = [
      { prompt: [1, 2, 3], response: [4, 5] },
      { prompt: [6], response: [7, 8, 9] },
      { prompt: [10, 11], response: [12] },
    ];
    const full = batchFromTokens(rows, { padId: PAD_ID });
    const sub = selectRows(full, [2, 0]);
    const again = batchFromTokens([rows[2], rows[0]], { padId: PAD_ID, P: full.P, R: full.R });
    expect(sub.n).toBe(2);
    expect(Array.from(sub.inputIds)).toEqual(Array.from(again.inputIds));
    expect(Array.from(sub.attentionMask)).toEqual(Array.from(again.attentionMask));
    expect(Array.from(sub.positionIds)).toEqual(Array.from(again.positionIds));
  });
});

describe("GRPO", () => {
  const make = (o: Partial<ConstructorParameters<typeof GRPO>[0]> = {}) => {
    const params = initParams(config, 0);
    return new GRPO({
      trainer: new CpuTrainer({ config, params }),
      policy: new ModelPolicy({ model: "m", config, params }),
      maxPromptLength: 24,
      maxResponseLength: 8,
      progress: false,
      ...o,
    });
  };

  it("rejects a non-positive group size or batch size", () => {
    expect(() => make({ nSamples: 0 })).toThrow(/nSamples/);
    expect(() => make({ batchSize: 1.5 })).toThrow(/batchSize/);
  });

  it("rejects bad PPO settings, and a KL term without a LoRA trainer (whose base is the reference)", () => {
    expect(() => make({ ppoEpochs: 0 })).toThrow(/ppoEpochs/);
    expect(() => make({ miniBatchSize: 2.5 })).toThrow(/miniBatchSize/);
    expect(() => make({ startStep: 21 })).toThrow(/startStep/);
    expect(() => make({ loss: { klLossCoef: 0.1 } })).toThrow(/LoRA trainer/);
    expect(() => make({ trackKl: true })).toThrow(/LoRA trainer/);
    expect(() => make({ traceAggregator: { level: "episode" as never } })).toThrow(/traceAggregator\.level must be one of/);
    expect(() => make({ grouping: "turn" as never })).toThrow(/grouping must be one of/);
    expect(() => make({ traceAggregator: { level: "trajectory" }, grouping: "sample" })).not.toThrow();
    const params = initParams(config, 0);
    const lora = { config: { r: 2, alpha: 4, targetModules: ["q_proj" as const] }, base: params };
    expect(() => make({ trainer: new CpuTrainer({ config, lora }), loss: { klLossCoef: 0.1 } })).not.toThrow();
  });

  it("needs a training dataset and a policy server as its LLM proxy", async () => {
    const g = make();
    g.setStore(new InMemoryLightningStore());
    await expect(g.run([], null)).rejects.toThrow(/non-empty training dataset/);
    await expect(g.run([{ q: 1 }], null)).rejects.toThrow(/LLM proxy/);
  });
});

describe("combineMetrics", () => {
  const m = (o: Partial<StepMetrics>): StepMetrics => ({
    loss: 0,
    pg_loss: 0,
    clip_frac: 0,
    clip_frac_lower: 0,
    approx_kl: 0,
    entropy: 0,
    grad_norm: 0,
    tokens_per_second: 100,
    tokens: 10,
    skipped: false,
    step: 1,
    ...o,
  });

  it("averages the taken updates weighted by tokens and leaves skipped ones out", () => {
    const c = combineMetrics([
      m({ clip_frac: 0.1, approx_kl: 0.01, tokens: 10, step: 1 }),
      m({ clip_frac: NaN, loss: NaN, tokens: 20, skipped: true, step: 1 }),
      m({ clip_frac: 0.4, approx_kl: 0.04, tokens: 30, step: 2 }),
    ]);
    expect(c.clip_frac).toBeCloseTo((0.1 * 10 + 0.4 * 30) / 40, 10);
    expect(c.approx_kl).toBeCloseTo((0.01 * 10 + 0.04 * 30) / 40, 10);
    expect(c.loss).toBe(0);
    expect(c.tokens).toBe(60);
    expect(c.skipped).toBe(false);
    expect(c.step).toBe(2);
  });

  it("is skipped only when every update was", () => {
    expect(combineMetrics([m({ skipped: true }), m({ skipped: true })]).skipped).toBe(true);
  });
});
