/**
 * The PPO family's pieces: the KL controllers, the estimator choice, and the wiring of one update
 * (`ppoUpdate`) against a policy trainer and a critic that record their calls and return values chosen
 * here, so the order of the calls and what each receives (GAE's values, the returns, the KL-penalised
 * rewards) can be checked exactly. The whole loop on the calc task runs in test/demo/calc-ppo.test.ts.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { FinishedRollout } from "../../src/adapter/index.ts";
import { ADVANTAGE_ESTIMATORS, computeAdvantages } from "../../src/algorithm/advantages.ts";
import { ppoUpdate, type PpoUpdateOptions } from "../../src/algorithm/grpo-step.ts";
import { AdaptiveKlController, FixedKlController, klController } from "../../src/algorithm/kl-controller.ts";
import { dumpGenerations, PPO } from "../../src/algorithm/ppo.ts";
import type { PpoOptions } from "../../src/algorithm/ppo-options.ts";
import { CpuTrainer } from "../../src/cpu/index.ts";
import { initParams, presetConfig } from "../../src/model/index.ts";
import type { LogProbOptions, PolicyStepOptions, PolicyTrainer, StepMetrics, TokenBatch } from "../../src/model/train-types.ts";
import type { ValueStepMetrics, ValueStepOptions, ValueTrainer } from "../../src/model/value-types.ts";
import { ModelPolicy } from "../../src/proxy/index.ts";
import { ValidationError } from "../../src/types/errors.ts";
import { referenceKernels as ref } from "../../src/wasm/index.ts";
import { randomMask, randomRewards, rng } from "../wasm/random.ts";

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe("KL controllers (verl's kl_ctrl)", () => {
  it("fixed: β never moves", () => {
    const c = klController({ klCoef: 0.05 });
    expect(c).toBeInstanceOf(FixedKlController);
    c.update(3, 100);
    expect(c.value).toBe(0.05);
    expect(klController().value).toBe(0.001); // verl's default kl_coef
  });

  it("adaptive: β *= 1 + clip(KL/target − 1, ±0.2) · n/horizon", () => {
    const c = klController({ type: "adaptive", klCoef: 0.1, targetKl: 0.05, horizon: 100 });
    expect(c).toBeInstanceOf(AdaptiveKlController);
    // KL 0.06: error 0.06/0.05 − 1 = 0.2; β = 0.1 · (1 + 0.2 · 10/100) = 0.1 · 1.02 = 0.102
    c.update(0.06, 10);
    expect(c.value).toBeCloseTo(0.102, 12);
    // KL 0.2: error 3 clipped to 0.2; β = 0.102 · 1.02 = 0.10404
    c.update(0.2, 10);
    expect(c.value).toBeCloseTo(0.10404, 12);
    // KL 0.025: error −0.5 clipped to −0.2, 50 rows; β = 0.10404 · (1 − 0.2 · 50/100) = 0.10404 · 0.9 = 0.093636
    c.update(0.025, 50);
    expect(c.value).toBeCloseTo(0.093636, 12);
    // KL 0.055: error 0.1, 100 rows; β = 0.093636 · 1.1 = 0.1029996
    c.update(0.055, 100);
    expect(c.value).toBeCloseTo(0.1029996, 12);
  });

  it("refuses what it cannot use, naming the option", () => {
    const issue = (o: Parameters<typeof klController>[0]) => {
      try {
        klController(o);
      } catch (e) {
        expect(e).toBeInstanceOf(ValidationError);
        return (e as ValidationError).issues[0].path.join(".");
      }
      return null;
    };
    expect(issue({ type: "pid" as never })).toBe("klCtrl.type");
    expect(issue({ type: "adaptive", horizon: 0 })).toBe("klCtrl.horizon");
    expect(issue({ type: "adaptive", targetKl: 0 })).toBe("klCtrl.targetKl");
    expect(issue({ klCoef: -1 })).toBe("klCtrl.klCoef");
    expect(issue({ type: "adaptive" })).toBe(null);
  });
});

describe("computeAdvantages: verl's estimator names", () => {
  it("each name runs its kernel (checked against the reference kernel on random batches)", () => {
    for (let s = 0; s < 40; s++) {
      const r = rng(400 + s);
      const B = r.int(2, 12),
        T = r.int(2, 9);
      const mask = randomMask(r, B, T).map((v, k) => (k % T === 0 ? 1 : v)); // every row has a token
      const rewards = randomRewards(r, B, T, mask);
      const groups = Int32Array.from({ length: B }, (_, i) => i >> 1); // pairs (pass@k needs two per group)
      if (B % 2) groups[B - 1] = groups[B - 2];
      const values = Float32Array.from({ length: B * T }, () => r.float(-1, 1));
      const baselines = Float32Array.from({ length: B }, () => r.float(0, 1));
      const x = { rewards, mask, groups, B, T, values, baselines };
      const o = { gamma: 0.9, lam: 0.8, normByStd: r.bool() };
      const want: Record<string, ReturnType<typeof ref.grpo>> = {
        gae: ref.gae(x, 0.9, 0.8),
        grpo: ref.grpo(x, o.normByStd),
        grpo_passk: ref.grpoPassk(x, o.normByStd),
        rloo: ref.rloo(x),
        opo: ref.opo(x),
        gpg: ref.gpg(x),
        reinforce_plus_plus: ref.reinforcePlusPlus(x, 0.9),
        reinforce_plus_plus_baseline: ref.reinforcePlusPlusBaseline(x),
        remax: ref.remax(x),
      };
      expect(Object.keys(want).sort()).toEqual([...ADVANTAGE_ESTIMATORS].sort());
      for (const name of ADVANTAGE_ESTIMATORS) {
        const got = computeAdvantages(ref, name, x, o);
        expect(Array.from(got.advantages), name).toEqual(Array.from(want[name].advantages));
        expect(Array.from(got.returns), name).toEqual(Array.from(want[name].returns));
      }
    }
  });

  it("names the option when the estimator is unknown or lacks its input", () => {
    const x = { rewards: new Float32Array(2), mask: new Float32Array([1, 1]), groups: new Int32Array(2), B: 2, T: 1 };
    expect(() => computeAdvantages(ref, "ppo" as never, x)).toThrow(/advEstimator must be one of gae, grpo/);
    expect(() => computeAdvantages(ref, "gae", x)).toThrow(/critic's values/);
    expect(() => computeAdvantages(ref, "remax", x)).toThrow(/greedy baseline/);
  });
});

// ---- one update against recording fakes

/** A rollout of one call: prompt [1, 2], `response` ids, final reward. */
const rollout = (id: string, dataId: string, response: number[], reward: number, prompt = [1, 2]): FinishedRollout => ({
  rollout_id: id,
  data_id: dataId,
  triplets: [{ prompt: { token_ids: prompt }, response: { token_ids: response }, reward, metadata: {} }],
});

/** Per-token value of a batch's response tokens from their ids (so a row's value does not depend on which rows are asked). */
function perToken(b: TokenBatch, f: (id: number) => number): Float32Array {
  const W = b.P + b.R;
  const out = new Float32Array(b.n * b.R);
  for (let i = 0; i < b.n; i++)
    for (let j = 0; j < b.R; j++) if (b.attentionMask[i * W + b.P + j]) out[i * b.R + j] = f(b.inputIds[i * W + b.P + j]);
  return out;
}

/** The response token ids of each row (unpadded): what identifies a row in the recorded calls. */
function rowsOf(b: TokenBatch): number[][] {
  const W = b.P + b.R;
  return Array.from({ length: b.n }, (_, i) =>
    Array.from({ length: b.R }, (_, j) => i * W + b.P + j)
      .filter((k) => b.attentionMask[k])
      .map((k) => b.inputIds[k]),
  );
}

const metricsOf = (tokens: number): StepMetrics => ({
  loss: 0.5,
  pg_loss: 0.4,
  clip_frac: 0.1,
  clip_frac_lower: 0,
  approx_kl: 0.01,
  entropy: 1.5,
  grad_norm: 2,
  tokens_per_second: 100,
  tokens,
  skipped: false,
  step: 1,
});

interface Recorded {
  events: string[];
  logProbs: { rows: number[][]; baseOnly: boolean; temperature?: number }[];
  steps: { rows: number[][]; advantages: Float32Array; old: Float32Array; options: PolicyStepOptions }[];
  valueSteps: { rows: number[][]; returns: Float32Array; oldValues: Float32Array; options: ValueStepOptions }[];
}

/** A policy trainer whose old log-prob of token id x is −0.05x and reference log-prob −0.06x; it records every call. */
function fakes(): { policy: PolicyTrainer; critic: ValueTrainer; rec: Recorded } {
  const rec: Recorded = { events: [], logProbs: [], steps: [], valueSteps: [] };
  const config = presetConfig("tiny");
  const policy: PolicyTrainer = {
    config,
    backend: "cpu",
    loraConfig: { r: 2, alpha: 4, targetModules: ["q_proj"] },
    async logProbs(b: TokenBatch, o?: LogProbOptions) {
      rec.events.push(o?.baseOnly ? "refLogProbs" : "logProbs");
      rec.logProbs.push({ rows: rowsOf(b), baseOnly: o?.baseOnly === true, temperature: o?.temperature });
      return { log_probs: perToken(b, (id) => (o?.baseOnly ? -0.06 : -0.05) * id), entropy: new Float32Array(b.n * b.R) };
    },
    async policyStep(b, advantages, old, options = {}) {
      rec.events.push("policyStep");
      rec.steps.push({ rows: rowsOf(b), advantages: advantages.slice(), old: old.slice(), options });
      return metricsOf(b.n);
    },
    sftStep: () => Promise.reject(new Error("not used")),
    getState: () => Promise.reject(new Error("not used")),
    setState: () => Promise.reject(new Error("not used")),
  };
  const critic: ValueTrainer = {
    config,
    backend: "cpu",
    // V of a response token with id x: 0.01x (0 off the mask)
    async values(b) {
      rec.events.push("values");
      return perToken(b, (id) => 0.01 * id);
    },
    async valueStep(b, returns, oldValues, options = {}): Promise<ValueStepMetrics> {
      rec.events.push("valueStep");
      rec.valueSteps.push({ rows: rowsOf(b), returns: returns.slice(), oldValues: oldValues.slice(), options });
      return { vf_loss: 0.25, vf_clipfrac: 0.5, vpred_mean: 0.1, grad_norm: 3, tokens: b.n, skipped: false, step: rec.valueSteps.length };
    },
    getState: () => Promise.reject(new Error("not used")),
    setState: () => Promise.reject(new Error("not used")),
  };
  return { policy, critic, rec };
}

const options: PpoUpdateOptions = { maxPromptLength: 4, maxResponseLength: 3 };
const near = (got: ArrayLike<number>, want: number[], digits = 6) => {
  expect(got.length).toBe(want.length);
  want.forEach((w, k) => expect(got[k], `[${k}]`).toBeCloseTo(w, digits));
};

describe("ppoUpdate: one step of the PPO family", () => {
  it("gae: values first, then the critic's update on the returns around the old values, then the actor on GAE's advantages", async () => {
    const { policy, critic, rec } = fakes();
    const finished = [
      rollout("a", "t0", [5, 6], 1),
      rollout("b", "t0", [7], 0),
      rollout("c", "t1", [8, 9, 10], 0.5),
      rollout("d", "t1", [11], 0),
    ];
    const u = await ppoUpdate(policy, finished, {
      ...options,
      advEstimator: "gae",
      gamma: 0.9,
      lam: 0.8,
      critic: { trainer: critic, cliprangeValue: 0.3, lr: 1e-4, ppoEpochs: 2, miniBatchSize: 2, lossAggMode: "seq-mean-token-sum" },
    });
    expect(rec.events).toEqual(["values", "valueStep", "valueStep", "valueStep", "valueStep", "logProbs", "policyStep"]);
    // GAE's inputs: the token-level scores (reward on the last response token), the critic's values, the mask
    const t = u.batch.tensors;
    const mask = Float32Array.from(t.responseMask);
    near(u.values!, [0.05, 0.06, 0, 0.07, 0, 0, 0.08, 0.09, 0.1, 0.11, 0, 0]);
    const want = ref.gae({ rewards: t.tokenLevelScores, values: u.values!, mask, B: 4, T: 3 }, 0.9, 0.8);
    expect(Array.from(u.advantages)).toEqual(Array.from(want.advantages));
    expect(Array.from(u.returns)).toEqual(Array.from(want.returns));
    // the actor gets every row with those advantages and its old log-probs
    expect(rec.steps[0].rows).toEqual([[5, 6], [7], [8, 9, 10], [11]]);
    expect(Array.from(rec.steps[0].advantages)).toEqual(Array.from(want.advantages));
    near(rec.steps[0].old, [-0.25, -0.3, 0, -0.35, 0, 0, -0.4, -0.45, -0.5, -0.55, 0, 0]);
    // the critic: 2 epochs x 2 mini-batches of 2 rows, each with its rows' returns and old values and the critic's options
    expect(rec.valueSteps.map((v) => v.rows.length)).toEqual([2, 2, 2, 2]);
    for (const v of rec.valueSteps) {
      expect(v.options).toMatchObject({ cliprangeValue: 0.3, lr: 1e-4, lossAggMode: "seq-mean-token-sum" });
      v.rows.forEach((row, i) => {
        const k = [[5, 6], [7], [8, 9, 10], [11]].findIndex((r) => r[0] === row[0]);
        expect(Array.from(v.returns.subarray(i * 3, i * 3 + 3))).toEqual(Array.from(want.returns.subarray(k * 3, k * 3 + 3)));
        expect(Array.from(v.oldValues.subarray(i * 3, i * 3 + 3))).toEqual(Array.from(u.values!.subarray(k * 3, k * 3 + 3)));
      });
    }
    // each epoch sees every row
    const firstEpoch = rec.valueSteps.slice(0, 2).flatMap((v) => v.rows.map((r) => r[0]));
    expect(firstEpoch.sort((a, b) => a - b)).toEqual([5, 7, 8, 11]);
    expect(u.criticUpdates).toBe(4);
    expect(u.verlMetrics).toMatchObject({
      "critic/vf_loss": 0.25,
      "critic/vf_clipfrac": 0.5,
      "critic/vpred_mean": 0.1,
      "critic/grad_norm": 3,
    });
    // verl's data metrics: scores 1, 0, 0.5, 0; values and returns over the masked tokens
    expect(u.verlMetrics["critic/score/mean"]).toBeCloseTo(0.375, 6);
    expect(u.verlMetrics["critic/values/mean"]).toBeCloseTo((0.05 + 0.06 + 0.07 + 0.08 + 0.09 + 0.1 + 0.11) / 7, 6);
    expect(u.verlMetrics["critic/values/max"]).toBeCloseTo(0.11, 6);
    expect(u.verlMetrics["response_length/mean"]).toBe(7 / 4);
    expect(u.verlMetrics["response_length/clip_ratio"]).toBe(1 / 4);
    expect(u.verlMetrics["prompt_length/mean"]).toBe(2);
    expect(u.verlMetrics["actor/pg_loss"]).toBe(0.4);
  });

  it("critic warm-up: the critic trains, the actor neither computes log-probs nor steps", async () => {
    const { policy, critic, rec } = fakes();
    const finished = [rollout("a", "t0", [5, 6], 1), rollout("b", "t0", [7], 0)];
    const u = await ppoUpdate(policy, finished, { ...options, advEstimator: "gae", critic: { trainer: critic }, updateActor: false });
    expect(rec.events).toEqual(["values", "valueStep"]);
    expect(rec.valueSteps[0].options.cliprangeValue).toBe(0.5); // verl's default cliprange_value
    expect([u.trainedRows, u.updates, u.changed]).toEqual([0, 0, false]);
    expect(u.verlMetrics["actor/pg_loss"]).toBeUndefined();
  });

  it("KL in the reward: scores − β·KL(old ‖ ref) per token, then the estimator, and the controller moves β", async () => {
    const { policy, rec } = fakes();
    const ctrl = klController({ type: "adaptive", klCoef: 0.5, targetKl: 0.05, horizon: 10 });
    const finished = [rollout("a", "t0", [5, 6], 1), rollout("b", "t0", [7], 0)];
    const u = await ppoUpdate(policy, finished, { ...options, advEstimator: "rloo", useKlInReward: true, klPenalty: "kl", klCtrl: ctrl });
    expect(rec.events).toEqual(["logProbs", "refLogProbs", "policyStep"]);
    // k1 = old − ref = −0.05x + 0.06x = 0.01x: row a [0.05, 0.06], row b [0.07]; β = 0.5
    // rewards: a [0 − 0.5·0.05, 1 − 0.5·0.06] = [−0.025, 0.97], b [0 − 0.5·0.07] = [−0.035]
    near(u.tokenRewards, [-0.025, 0.97, 0, -0.035, 0, 0]);
    // RLOO of the two: a 0.945 − (−0.035) = 0.98, b −0.98
    near(u.advantages, [0.98, 0.98, 0, -0.98, 0, 0], 5);
    // current KL: mean over rows of each row's masked mean = (0.055 + 0.07) / 2 = 0.0625
    expect(u.verlMetrics["actor/reward_kl_penalty"]).toBeCloseTo(0.0625, 6);
    expect(u.verlMetrics["actor/reward_kl_penalty_coeff"]).toBe(0.5);
    // error 0.0625/0.05 − 1 = 0.25 → 0.2; β = 0.5 · (1 + 0.2 · 2/10) = 0.52
    expect(ctrl.value).toBeCloseTo(0.52, 6);
    // the scores stay as they were: verl's critic/score is before the penalty, critic/rewards after
    expect(u.verlMetrics["critic/score/mean"]).toBeCloseTo(0.5, 6);
    expect(u.verlMetrics["critic/rewards/mean"]).toBeCloseTo((0.945 - 0.035) / 2, 6);
    // the actor reuses the old log-probs computed for the penalty
    near(rec.steps[0].old, [-0.25, -0.3, 0, -0.35, 0, 0]);
  });

  it("the rollouts' temperature reaches every log-prob pass: old, reference (in the reward and the loss) and the policy steps", async () => {
    const finished = [rollout("a", "t0", [5, 6], 1), rollout("b", "t0", [7], 0), rollout("c", "t1", [8], 1), rollout("d", "t1", [9], 0)];
    for (const [temperature, passed] of [
      [0.7, 0.7],
      [undefined, 1],
      [0, 1], // greedy rollouts: the logits as they are
    ] as const) {
      const { policy, rec } = fakes();
      await ppoUpdate(policy, finished, {
        ...options,
        temperature,
        useKlInReward: true,
        trackKl: true,
        loss: { klLossCoef: 0.1 },
        ppoEpochs: 2,
        miniBatchSize: 2,
      });
      expect(rec.logProbs.map((l) => [l.baseOnly, l.temperature])).toEqual([
        [false, passed],
        [true, passed],
      ]);
      expect(rec.steps).toHaveLength(4);
      for (const s of rec.steps) expect(s.options.temperature).toBe(passed);
    }
    // without the KL in the reward, the actor's own old and reference passes get it too
    const { policy, rec } = fakes();
    await ppoUpdate(policy, finished, { ...options, temperature: 1.3, trackKl: true });
    expect(rec.logProbs.map((l) => [l.baseOnly, l.temperature])).toEqual([
      [false, 1.3],
      [true, 1.3],
    ]);
    expect(rec.steps[0].options.temperature).toBe(1.3);
  });

  it("remax: each row's baseline is its task's greedy reward; a row without one is an error", async () => {
    const { policy } = fakes();
    const finished = [rollout("a", "t0", [5, 6], 1), rollout("b", "t0", [7], 0)];
    const u = await ppoUpdate(policy, finished, { ...options, advEstimator: "remax", rewardBaselines: new Map([["t0", 0.25]]) });
    // returns: reverse cumsum of the rewards; advantages = returns − 0.25 on the masked tokens
    near(u.returns, [1, 1, 0, 0, 0, 0]);
    near(u.advantages, [0.75, 0.75, 0, -0.25, 0, 0]);
    await expect(ppoUpdate(policy, finished, { ...options, advEstimator: "remax", rewardBaselines: new Map() })).rejects.toThrow(
      /no greedy baseline reward for row 0 \(data id t0\)/,
    );
  });

  it("over-long prompts are dropped after the advantages; dropRemainder rounds the actor's rows to the mini-batch", async () => {
    const { policy, rec } = fakes();
    const finished = [
      rollout("a", "t0", [5], 1),
      rollout("b", "t0", [6], 0),
      rollout("c", "t0", [7], 1),
      rollout("d", "t0", [8], 0),
      rollout("e", "t0", [9], 1, [1, 2, 3, 4, 5]), // prompt longer than 4
    ];
    const u = await ppoUpdate(policy, finished, { ...options, advEstimator: "grpo", miniBatchSize: 3, dropRemainder: true });
    expect(u.verlMetrics["training/n_triplets_prompt_too_long"]).toBe(1);
    expect(u.verlMetrics["training/n_triplets_dropped_remainder"]).toBe(1);
    expect(u.trainedRows).toBe(3);
    expect(rec.steps.map((s) => s.rows.length)).toEqual([3]);
    expect(Array.from(u.trained).reduce((a, b) => a + b, 0)).toBe(3);
    expect(u.trained[4]).toBe(0);
    // the group's statistics still count the dropped row (as upstream): scores 1, 0, 1, 0, 1 → mean 0.6
    expect(u.advantages[0]).toBeCloseTo(0.4 / Math.sqrt(0.3), 5);
    // without rounding the last mini-batch is smaller
    const { policy: p2, rec: r2 } = fakes();
    await ppoUpdate(p2, finished, { ...options, miniBatchSize: 3 });
    expect(r2.steps.map((s) => s.rows.length)).toEqual([3, 1]);
  });

  it("refuses gae without a critic, and a critic with another estimator", async () => {
    const { policy, critic } = fakes();
    await expect(ppoUpdate(policy, [], { ...options, advEstimator: "gae" })).rejects.toThrow(/gae needs a critic/);
    await expect(ppoUpdate(policy, [], { ...options, advEstimator: "rloo", critic: { trainer: critic } })).rejects.toThrow(
      /only used by advEstimator gae/,
    );
  });
});

describe("rolloutDataDir: the generations dump", () => {
  it("writes <step>.jsonl with each row's text, ids, score, reward, advantages and step; it reads back", async () => {
    const { policy } = fakes();
    const finished = [rollout("a", "t0", [72, 105], 1), rollout("b", "t0", [33], 0)];
    const u = await ppoUpdate(policy, finished, { ...options, advEstimator: "rloo" });
    const dir = await mkdtemp(join(tmpdir(), "ppo-dump-"));
    dirs.push(dir);
    const path = await dumpGenerations(`${dir}/gens`, 7, u, (ids) => String.fromCharCode(...ids));
    expect(path).toBe(`${dir}/gens/7.jsonl`);
    const lines = (await readFile(path, "utf8"))
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(lines).toEqual([
      {
        input: "\u0001\u0002",
        output: "Hi",
        score: 1,
        step: 7,
        data_id: "t0",
        rollout_id: "a",
        prompt_ids: [1, 2],
        response_ids: [72, 105],
        reward: 1,
        advantages: [1, 1],
        trained: true,
      },
      {
        input: "\u0001\u0002",
        output: "!",
        score: 0,
        step: 7,
        data_id: "t0",
        rollout_id: "b",
        prompt_ids: [1, 2],
        response_ids: [33],
        reward: 0,
        advantages: [-1],
        trained: true,
      },
    ]);
  });
});

describe("PPO", () => {
  const config = { ...presetConfig("tiny"), d_model: 32, n_layers: 1, n_heads: 2, n_kv_heads: 1, d_ff: 64, max_seq_len: 32 };
  const make = (o: Partial<PpoOptions> = {}) => {
    const params = initParams(config, 0);
    return new PPO({
      trainer: new CpuTrainer({ config, params }),
      policy: new ModelPolicy({ model: "m", config, params }),
      maxPromptLength: 24,
      maxResponseLength: 8,
      progress: false,
      ...o,
    });
  };
  const critic = fakes().critic;

  it("rejects settings it cannot run, naming the option", () => {
    const path = (o: Partial<PpoOptions>) => {
      try {
        make(o);
      } catch (e) {
        return (e as ValidationError).issues[0].path.join(".");
      }
      return null;
    };
    expect(path({ advEstimator: "ppo" as never })).toBe("advEstimator");
    expect(path({ advEstimator: "gae" })).toBe("critic");
    expect(path({ advEstimator: "grpo", critic: { trainer: critic } })).toBe("critic");
    expect(path({ advEstimator: "gae", critic: { trainer: critic, ppoEpochs: 0 } })).toBe("critic.ppoEpochs");
    expect(path({ advEstimator: "gae", critic: { trainer: critic, cliprangeValue: 0 } })).toBe("critic.cliprangeValue");
    expect(path({ gamma: 1.5 })).toBe("gamma");
    expect(path({ criticWarmup: -1 })).toBe("criticWarmup");
    expect(path({ klPenalty: "k4" as never })).toBe("klPenalty");
    expect(path({ useKlInReward: true })).toBe("useKlInReward"); // full fine-tuning has no reference model
    expect(path({ klCtrl: { type: "adaptive", horizon: -1 } })).toBe("klCtrl.horizon");
    expect(path({ advEstimator: "gae", critic: { trainer: critic }, criticWarmup: 2, gamma: 0.99, lam: 0.95 })).toBe(null);
    const params = initParams(config, 0);
    const lora = new CpuTrainer({ config, lora: { config: { r: 2, alpha: 4, targetModules: ["q_proj"] }, base: params } });
    expect(path({ trainer: lora, useKlInReward: true, klCtrl: { type: "adaptive" } })).toBe(null);
  });

  it("defaults to GRPO's estimator and a fixed β of 0.001; the PPO name is in its errors", async () => {
    const p = make();
    expect(p.options.advEstimator).toBe("grpo");
    expect(p.klCtrl.value).toBe(0.001);
    await expect(p.run([], null)).rejects.toThrow(/PPO needs a non-empty training dataset/);
  });
});
