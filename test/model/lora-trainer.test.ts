// The CPU trainer with a LoRA adapter on a frozen Hugging Face base (the Qwen3 fixture): step 0 is the
// base, SFT steps lower the loss, the base never changes, policy steps report KL against the base's own
// log-probs, and the state holds the adapter alone.
import { describe, expect, it } from "vitest";
import { batchFromTokens } from "../../src/model/batch.ts";
import { CpuTrainer } from "../../src/cpu/trainer.ts";
import { loadPretrained } from "../../src/model/hf/index.ts";
import { loraParamCount, parseLoraConfig } from "../../src/model/lora.ts";
import type { TokenBatch } from "../../src/model/train-types.ts";

const LORA = parseLoraConfig({ r: 4, alpha: 8, targetModules: ["q_proj", "v_proj", "up_proj", "down_proj"] });

function batch(): TokenBatch {
  const rows = [
    { prompt: [5, 6, 7], response: [8, 9, 10, 11] },
    { prompt: [12, 13], response: [14, 15, 16] },
    { prompt: [17, 18, 19, 20], response: [21, 22] },
  ];
  return batchFromTokens(rows, { padId: 0 });
}

async function setup() {
  const model = await loadPretrained("test/fixtures/hf/qwen3-qknorm-headdim");
  const baseCopy = Object.fromEntries(Object.entries(model.weights).map(([k, v]) => [k, v.slice()]));
  const trainer = new CpuTrainer({ config: model.config, lr: 1e-2, lora: { config: LORA, base: model.weights, seed: 1 } });
  return { model, baseCopy, trainer };
}

describe("CpuTrainer with a LoRA adapter", () => {
  it("starts as the base, trains the adapter only, and lowers the SFT loss", async () => {
    const { model, baseCopy, trainer } = await setup();
    const b = batch();
    const base = await trainer.logProbs(b, { baseOnly: true });
    const start = await trainer.logProbs(b);
    expect(Array.from(start.log_probs)).toEqual(Array.from(base.log_probs));
    const losses: number[] = [];
    for (let i = 0; i < 12; i++) losses.push((await trainer.sftStep(b)).loss);
    expect(losses[losses.length - 1]).toBeLessThan(losses[0] * 0.8);
    for (const [name, w] of Object.entries(model.weights)) expect(Array.from(w), name).toEqual(Array.from(baseCopy[name]));
    expect(Array.from((await trainer.logProbs(b, { baseOnly: true })).log_probs)).toEqual(Array.from(base.log_probs));
    const state = await trainer.getState();
    expect(state.params).toHaveLength(loraParamCount(model.config, LORA));
    expect(state.lora).toEqual(LORA);
    expect(state.optimizer.step).toBe(12);
  });

  it("policy steps report clip fraction and KL against the base's log-probs, without a second model", async () => {
    const { trainer } = await setup();
    const b = batch();
    const adv = new Float32Array(b.n * b.R).map((_, i) => (Math.floor(i / b.R) % 2 === 0 ? 1 : -1));
    const ref = (await trainer.logProbs(b, { baseOnly: true })).log_probs;
    let old = (await trainer.logProbs(b)).log_probs;
    const metrics = [];
    for (let i = 0; i < 4; i++) {
      metrics.push(await trainer.policyStep(b, adv, old, { refLogProbs: ref, klLossCoef: 0.1, klLossType: "low_var_kl", entropyCoeff: 0 }));
      if (i === 1) old = (await trainer.logProbs(b)).log_probs;
    }
    expect(metrics.every((m) => !m.skipped && Number.isFinite(m.loss))).toBe(true);
    const now = (await trainer.logProbs(b)).log_probs;
    expect(Array.from(now)).not.toEqual(Array.from(ref));
    // Once the adapter has moved, the ratio to the old log-probs and the KL term to the base are real numbers.
    expect(Math.abs(metrics[1].approx_kl)).toBeGreaterThan(0);
    expect(metrics[0].loss).toBeCloseTo(metrics[0].pg_loss, 12); // step 0: adapter = base, KL 0
    expect(metrics.slice(1).every((m) => Math.abs(m.loss - m.pg_loss) > 1e-9)).toBe(true);
    expect(metrics.every((m) => m.clip_frac >= 0 && m.clip_frac <= 1)).toBe(true);
  });

  it("restores its state, and refuses a state or adapter that does not fit", async () => {
    const { model, trainer } = await setup();
    await trainer.sftStep(batch());
    const state = await trainer.getState();
    const other = new CpuTrainer({ config: model.config, lora: { config: LORA, base: model.weights } });
    await other.setState(state);
    expect(Array.from((await other.logProbs(batch())).log_probs)).toEqual(Array.from((await trainer.logProbs(batch())).log_probs));
    await expect(other.setState({ ...state, lora: { ...LORA, r: 2 } })).rejects.toThrow(/LoRA config/);
    const full = new CpuTrainer({ config: model.config });
    await expect(full.setState(state)).rejects.toThrow(/LoRA config/);
    expect(
      () => new CpuTrainer({ config: model.config, lora: { config: LORA, base: model.weights, adapter: new Float32Array(5) } }),
    ).toThrow(/adapter has 5 elements/);
  });
});
