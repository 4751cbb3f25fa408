/**
 * The CPU engines on their default ops (the Wasm kernels over a worker pool) against the same engines on
 * the plain-TS reference (`ops: "reference"`), and against themselves on 1 and 2 threads: the trainer's
 * log-probs within 2e-5 and one step's loss, grad norm and new parameters within f32 noise (the kernels'
 * tolerances, src/cpu/README.md); greedy generation gives the reference's tokens; 1 and 2 threads give
 * the same bits. The generation engine keeps weights resident, so new weights or a new adapter must
 * still be what it generates with.
 */
import { afterAll, describe, expect, it } from "vitest";
import { createPolicyTrainer } from "../../src/engine/factory.ts";
import { batchFromTokens } from "../../src/model/batch.ts";
import { parseModelConfig } from "../../src/model/config.ts";
import { CpuTrainer, type CpuTrainerOptions } from "../../src/cpu/trainer.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import { initLora, loraParamCount, parseLoraConfig } from "../../src/model/lora.ts";
import { presetConfig } from "../../src/model/presets.ts";
import type { TokenBatch } from "../../src/model/train-types.ts";
import type { GenerationRequest } from "../../src/model/generation.ts";
import { CpuGenerationEngine } from "../../src/cpu/generation.ts";
import { ValidationError } from "../../src/types/errors.ts";

const config = parseModelConfig(presetConfig("tiny"));
const LORA = parseLoraConfig({ r: 4, alpha: 8, targetModules: ["q_proj", "v_proj", "down_proj"] });

function batch(): TokenBatch {
  const rows = [
    { prompt: [5, 6, 7, 40, 41], response: [8, 9, 10, 11, 60, 61] },
    { prompt: [12, 13], response: [14, 15, 16] },
    { prompt: [17, 18, 19, 20], response: [21, 22, 23, 24] },
  ];
  return batchFromTokens(rows, { padId: 0 });
}

function advantages(b: TokenBatch): Float32Array {
  const a = new Float32Array(b.n * b.R);
  for (let i = 0; i < b.n; i++) a.fill(i === 1 ? -1 : 1, i * b.R, (i + 1) * b.R);
  return a;
}

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

const open: { close(): void }[] = [];
afterAll(() => {
  for (const e of open) e.close();
});

function trainer(o: Partial<CpuTrainerOptions>): CpuTrainer {
  const t = new CpuTrainer({ config, seed: 1, lr: 1e-3, ...o });
  open.push(t);
  return t;
}

/** logProbs, then one policy step, then the new parameters. */
async function run(t: CpuTrainer) {
  const b = batch();
  const before = await t.logProbs(b);
  const metrics = await t.policyStep(
    b,
    advantages(b),
    before.log_probs.map((x) => x - 0.01),
  );
  const after = await t.logProbs(b);
  return { before, metrics, after, state: await t.getState() };
}

describe("the CPU trainer on its default (Wasm) ops", () => {
  it("defaults to the Wasm ops and validates the choice", () => {
    expect(trainer({}).opsChoice).toBe("wasm");
    expect(trainer({ ops: "reference" }).opsChoice).toBe("reference");
    expect(() => new CpuTrainer({ config, ops: "simd" as "wasm" })).toThrow(ValidationError);
    expect(() => new CpuTrainer({ config, threads: 1.5 })).toThrow(/threads must be a positive integer/);
  });

  it("createPolicyTrainer on the CPU passes the choice through", async () => {
    const wasm = (await createPolicyTrainer({ config, backend: "cpu" })) as CpuTrainer;
    const plain = (await createPolicyTrainer({ config, backend: "cpu", ops: "reference" })) as CpuTrainer;
    open.push(wasm, plain);
    expect([wasm.opsChoice, plain.opsChoice]).toEqual(["wasm", "reference"]);
    await expect(createPolicyTrainer({ config, backend: "cpu", threads: 0 })).rejects.toThrow(/threads/);
    await expect(createPolicyTrainer({ config, backend: "cpu", ops: "reference", threads: 2 })).rejects.toThrow(/threads applies/);
  });

  for (const lora of [false, true]) {
    const label = lora ? "LoRA adapter" : "whole model";
    const opts = (): Partial<CpuTrainerOptions> => (lora ? { lora: { config: LORA, base: initParams(config, 2), seed: 3 } } : {});

    it(`${label}: agrees with the reference, and 1 and 2 threads give the same bits`, { timeout: 120_000 }, async () => {
      const ref = await run(trainer({ ...opts(), ops: "reference" }));
      const one = await run(trainer({ ...opts(), threads: 1 }));
      const two = await run(trainer({ ...opts(), threads: 2 }));
      expect(maxAbsDiff(one.before.log_probs, ref.before.log_probs)).toBeLessThan(2e-5);
      expect(maxAbsDiff(one.before.entropy, ref.before.entropy)).toBeLessThan(2e-5);
      expect(Math.abs(one.metrics.loss - ref.metrics.loss)).toBeLessThan(1e-5);
      expect(Math.abs(one.metrics.grad_norm - ref.metrics.grad_norm)).toBeLessThan(1e-4 * ref.metrics.grad_norm);
      // AdamW moves every element by at most about lr: f32 noise in a gradient moves it by far less
      expect(maxAbsDiff(one.state.params, ref.state.params)).toBeLessThan(1e-4);
      expect(maxAbsDiff(one.after.log_probs, ref.after.log_probs)).toBeLessThan(1e-4);
      expect(Array.from(two.before.log_probs)).toEqual(Array.from(one.before.log_probs));
      expect(two.metrics.loss).toBe(one.metrics.loss);
      expect(two.metrics.grad_norm).toBe(one.metrics.grad_norm);
      expect(Array.from(two.state.params)).toEqual(Array.from(one.state.params));
      expect(Array.from(two.state.optimizer.v)).toEqual(Array.from(one.state.optimizer.v));
      expect(Array.from(two.after.log_probs)).toEqual(Array.from(one.after.log_probs));
    });
  }

  it("cannot step once closed", async () => {
    const t = new CpuTrainer({ config, seed: 1 });
    await t.logProbs(batch());
    t.close();
    await expect(t.logProbs(batch())).rejects.toThrow(/closed/);
  });
});

describe("the CPU generation engine on its default (Wasm) ops", () => {
  const engines = {
    reference: new CpuGenerationEngine({ ops: "reference" }),
    one: new CpuGenerationEngine({ threads: 1 }),
    two: new CpuGenerationEngine({ threads: 2 }),
  };
  open.push(...Object.values(engines));
  const greedy: GenerationRequest[] = [
    { prompt: [5, 6, 7], maxTokens: 12, temperature: 0, stopTokenIds: [] },
    { prompt: [30, 31, 32, 33, 34, 35, 36], maxTokens: 9, temperature: 0, stopTokenIds: [] },
  ];
  const sampled: GenerationRequest[] = [{ prompt: [9, 8], maxTokens: 10, temperature: 1, topP: 0.9, seed: 4, stopTokenIds: [] }];

  it("greedy tokens equal the reference's, log-probs within 1e-4; 1 and 2 threads give the same bits", { timeout: 60_000 }, async () => {
    const params = initParams(config, 7);
    const want = await engines.reference.generate(config, params, greedy);
    const one = await engines.one.generate(config, params, [...greedy, ...sampled]);
    const two = await engines.two.generate(config, params, [...greedy, ...sampled]);
    expect(engines.one.opsChoice).toBe("wasm");
    for (const [i, w] of want.entries()) {
      expect(one[i].tokenIds).toEqual(w.tokenIds);
      expect(maxAbsDiff(one[i].logprobs, w.logprobs)).toBeLessThan(1e-4);
    }
    expect(two).toEqual(one);
  });

  it("generates with new weights and a new adapter though the old ones were resident", { timeout: 60_000 }, async () => {
    const a = initParams(config, 7);
    const b = initParams(config, 8);
    const adapter = (seed: number) => {
      const p = initLora(config, LORA, seed);
      // PEFT's initialisation leaves B = 0; a random one makes the adapter matter
      const rng = new Rng(seed);
      for (let i = 0; i < p.length; i++) if (p[i] === 0) p[i] = rng.normal() * 0.05;
      return { config: LORA, params: p };
    };
    expect(loraParamCount(config, LORA)).toBeGreaterThan(0);
    const la = adapter(1);
    const lb = adapter(2);
    const seen = new Set<string>();
    for (const [params, lora] of [
      [a, undefined],
      [b, undefined],
      [b, la],
      [b, lb],
      [a, lb],
      [a, undefined],
    ] as const) {
      const want = await engines.reference.generate(config, params, greedy, undefined, lora);
      const got = await engines.one.generate(config, params, greedy, undefined, lora);
      expect(got.map((g) => g.tokenIds)).toEqual(want.map((g) => g.tokenIds));
      for (const [i, w] of want.entries()) expect(maxAbsDiff(got[i].logprobs, w.logprobs)).toBeLessThan(1e-4);
      seen.add(got.map((g) => g.logprobs.map((x) => x.toFixed(3)).join()).join());
    }
    // each set of weights gives its own log-probs, so a stale resident copy could not pass
    expect(seen.size).toBe(5);
  });
});
