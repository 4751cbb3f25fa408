/**
 * verl's config: every key of verl's PPO trainer defaults is classified and the resolved defaults load
 * to the options an empty config gives (the schema's defaults are verl's); Agent Lightning's Calc-X config
 * (examples/calc-x/verl-config.json: its example's dict with only the model path and sizes changed) maps
 * key by key; unknown keys, refused values and unresolved interpolations name their key path; batch sizes
 * become rows; verl's learning-rate schedule and step count.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import {
  classifyVerlKey,
  listVerlKeys,
  parseVerlConfig,
  stepsOfEpochs,
  verlLrFactor,
  verlSettings,
  warmupSteps,
  type VerlSettings,
} from "../../src/algorithm/verl-config.ts";
import { LORA_TARGETS } from "../../src/model/lora.ts";
import { ValidationError } from "../../src/types/errors.ts";

const settingsOf = (config: unknown): VerlSettings => verlSettings(parseVerlConfig(config));

/** The fixture's lines: `path = JSON value` (verl 0.6.1's resolved defaults) or a bare path (older verl only). */
function defaultsFixture(): { values: Record<string, unknown>; paths: string[] } {
  const values: Record<string, unknown> = {};
  const paths: string[] = [];
  for (const line of readFileSync("test/fixtures/verl/ppo-trainer-defaults.txt", "utf8").split("\n")) {
    if (line.trim() === "" || line.startsWith("#")) continue;
    const [path, json] = line.split(" = ") as [string, string | undefined];
    paths.push(path);
    if (json === undefined) continue;
    const keys = path.split(".");
    let node = values;
    for (const k of keys.slice(0, -1)) node = (node[k] ??= {}) as Record<string, unknown>;
    node[keys[keys.length - 1]!] = JSON.parse(json);
  }
  return { values, paths };
}

const thrown = (f: () => unknown): ValidationError => {
  try {
    f();
  } catch (e) {
    if (e instanceof ValidationError) return e;
    throw e;
  }
  throw new Error("did not throw");
};

describe("verl's keys", () => {
  it("classifies every key of verl 0.5-0.6's PPO trainer defaults as used, ignored or refused", () => {
    const { paths } = defaultsFixture();
    expect(paths.length).toBeGreaterThan(500);
    const unclassified = paths.filter((p) => classifyVerlKey(p.split(".")) === null);
    expect(unclassified).toEqual([]);
    const kinds = new Set(paths.map((p) => classifyVerlKey(p.split("."))!.kind));
    expect(kinds).toEqual(new Set(["used", "ignored", "refused"]));
    expect(classifyVerlKey(["algorithm", "adv_estimator"])).toEqual({ kind: "used" });
    expect(classifyVerlKey(["actor_rollout_ref", "actor", "fsdp_config", "anything", "deeper"])?.kind).toBe("ignored");
    expect(classifyVerlKey(["reward_model", "enable"])?.kind).toBe("refused");
    expect(classifyVerlKey(["algorithm", "adv_estimatr"])).toBeNull();
    expect(classifyVerlKey(["algorithm"])).toBeNull();
  });

  it("loads verl's resolved defaults to the options of an empty config: the schema's defaults are verl's", () => {
    const defaults = settingsOf(defaultsFixture().values);
    const empty = settingsOf({});
    expect(defaults.model.path).toBe("~/models/deepseek-llm-7b-chat");
    expect(defaults).toEqual({
      ...empty,
      model: { ...empty.model, path: "~/models/deepseek-llm-7b-chat" },
      critic: { ...empty.critic!, modelPath: "~/models/deepseek-llm-7b-chat" },
    });
    // verl's defaults as they map: GAE with a critic, 1024 prompts x 1 rollout, mini-batches of 256 prompts
    expect(empty.ppo).toMatchObject({ advEstimator: "gae", batchSize: 1024, nSamples: 1, miniBatchSize: 256, valEvery: 0 });
    expect(empty.ppo.checkpointEvery).toBe(Number.POSITIVE_INFINITY);
    expect(empty.ppo.microBatchSize).toBeUndefined();
    expect(empty.critic).toEqual({
      modelPath: null,
      cliprangeValue: 0.5,
      lr: 1e-5,
      ppoEpochs: 1,
      miniBatchSize: 256,
      microBatchSize: 256,
      lossAggMode: "token-mean",
      optimizer: { weightDecay: 0.01, beta1: 0.9, beta2: 0.999, maxGradNorm: 1 },
    });
    expect(empty.totalEpochs).toBe(30);
  });
});

describe("the docs' key table (docs/training.md#config)", () => {
  it("lists every key once, under its section, with its class", () => {
    const doc = readFileSync("docs/training.md", "utf8");
    const section = doc.slice(doc.indexOf("\n## Config\n"));
    const rows: { path: string; kind: string }[] = [];
    let prefix: string | null = null;
    for (const line of section.split("\n")) {
      const heading = /^\*\*(?:`([^`]+)`|top level)\*\*$/.exec(line);
      if (heading) prefix = heading[1] ?? "";
      else if (prefix !== null && line.startsWith("| `")) {
        const [keys, kind] = line.split(" | ") as [string, string];
        for (const [, key] of keys.matchAll(/`([^`]+)`/g))
          rows.push({ path: prefix ? `${prefix}.${key}` : key!, kind: kind.split(" ")[0]! });
      }
    }
    const byPath = (a: { path: string }, b: { path: string }) => a.path.localeCompare(b.path);
    expect(rows.sort(byPath)).toEqual(
      listVerlKeys()
        .map((k) => ({ path: k.path, kind: k.class.kind }))
        .sort(byPath),
    );
  });
});

describe("Agent Lightning's Calc-X config", () => {
  type Section = Record<string, unknown>;
  const calcX = JSON.parse(readFileSync("examples/calc-x/verl-config.json", "utf8")) as Section & {
    actor_rollout_ref: Section & { model: Section };
  };

  it("maps key by key onto the PPO options (only the model path and sizes differ from the example's)", () => {
    expect(settingsOf(calcX)).toEqual({
      ppo: {
        batchSize: 8, // data.train_batch_size
        nSamples: 4, // rollout.n
        maxPromptLength: 208,
        maxResponseLength: 48,
        traceAggregator: { level: "transition" },
        temperature: 1,
        lr: 1e-6,
        ppoEpochs: 1,
        miniBatchSize: 32, // ppo_mini_batch_size 8 prompts x n 4
        microBatchSize: 4, // ppo_micro_batch_size_per_gpu, rows
        normByStd: true,
        valEvery: 32, // trainer.test_freq
        checkpointEvery: 64, // trainer.save_freq
        advEstimator: "grpo",
        gamma: 1,
        lam: 1,
        useKlInReward: false,
        klPenalty: "kl",
        klCtrl: { type: "fixed", klCoef: 0.001, targetKl: 0.1, horizon: 10000 },
        criticWarmup: 0,
        rolloutDataDir: null,
        loss: {
          lossMode: "vanilla",
          clipCovRatio: 0.0002,
          clipCovLb: 1,
          clipCovUb: 5,
          klCovRatio: 0.0002,
          ppoKlCoef: 0.1,
          clipRatio: 0.2,
          clipRatioLow: 0.2,
          clipRatioHigh: 0.3, // DAPO's clip-higher
          clipRatioC: 3,
          lossAggMode: "token-mean",
          entropyCoeff: 0,
          klLossCoef: 0, // use_kl_loss false
          klLossType: "low_var_kl",
        },
      },
      optimizer: { lr: 1e-6, weightDecay: 0.01, beta1: 0.9, beta2: 0.999, maxGradNorm: 1 },
      lrSchedule: { warmupSteps: -1, warmupRatio: 0, type: "constant", minLrRatio: 0, numCycles: 0.5 },
      // no lora_rank: verl fine-tunes every weight
      model: { path: "examples/calc-x/model", loraRank: 0, loraAlpha: 16, targetModules: [...LORA_TARGETS], gradientCheckpointing: true },
      critic: null,
      totalTrainingSteps: null,
      totalEpochs: 2,
    });
  });

  it("with the example's --lora and --trajectory-level additions", () => {
    const s = settingsOf({
      ...calcX,
      actor_rollout_ref: { ...calcX.actor_rollout_ref, model: { ...calcX.actor_rollout_ref.model, lora_rank: 32 } },
      agentlightning: {
        trace_aggregator: { level: "trajectory", trajectory_max_prompt_length: 110, trajectory_max_response_length: 146 },
      },
    });
    expect(s.model).toMatchObject({ loraRank: 32, loraAlpha: 16 });
    // trajectory level: Agent Lightning's own limits replace data.max_*_length
    expect(s.ppo).toMatchObject({ traceAggregator: { level: "trajectory" }, maxPromptLength: 110, maxResponseLength: 146 });
  });
});

describe("bad configs name the key", () => {
  it("refuses a key verl does not have, at any depth", () => {
    expect(thrown(() => parseVerlConfig({ algoritm: {} })).message).toMatch(/^algoritm: not a key of verl's config/);
    const e = thrown(() => parseVerlConfig({ actor_rollout_ref: { actor: { ppo_mini_batch: 8 } } }));
    expect(e.message).toMatch(/^actor_rollout_ref\.actor\.ppo_mini_batch: not a key/);
    expect(e.issues[0]!.path).toEqual(["actor_rollout_ref", "actor", "ppo_mini_batch"]);
    expect(() => parseVerlConfig({ algorithm: { kl_ctrl: { kl_coeff: 0.1 } } })).toThrow(/algorithm\.kl_ctrl\.kl_coeff: not a key/);
  });

  it("refuses what it cannot honour, and ignores GPU placement whatever its value", () => {
    expect(() => parseVerlConfig({ reward_model: { enable: true } })).toThrow(
      /^reward_model\.enable: true is refused \(only false\): rewards are/,
    );
    expect(() => parseVerlConfig({ algorithm: { use_pf_ppo: true } })).toThrow(/algorithm\.use_pf_ppo/);
    expect(() => parseVerlConfig({ actor_rollout_ref: { model: { lora_adapter_path: "a/b" } } })).toThrow(
      /actor_rollout_ref\.model\.lora_adapter_path: "a\/b" is refused \(only null\)/,
    );
    expect(() => parseVerlConfig({ reward_model: { enable: false } })).not.toThrow();
    expect(() =>
      parseVerlConfig({
        actor_rollout_ref: {
          actor: { fsdp_config: { param_offload: true, fsdp_size: 8, something_new: [1] } },
          rollout: { tensor_model_parallel_size: 4, engine_kwargs: { vllm: { swap_space: 4 } } },
        },
        trainer: { n_gpus_per_node: 8, nnodes: 2 },
      }),
    ).not.toThrow();
  });

  it("refuses bad values with the key path, and verl's own cross-checks", () => {
    expect(() => parseVerlConfig({ algorithm: { adv_estimator: "ppo" } })).toThrow(/^algorithm\.adv_estimator: /);
    expect(() => parseVerlConfig({ actor_rollout_ref: { actor: { kl_loss_type: "full" } } })).toThrow(/actor\.kl_loss_type/);
    expect(() => parseVerlConfig({ actor_rollout_ref: { model: { target_modules: ["q_proj", "lm_head"] } } })).toThrow(
      /actor_rollout_ref\.model\.target_modules/,
    );
    expect(() => parseVerlConfig({ data: { train_batch_size: 8 }, actor_rollout_ref: { actor: { ppo_mini_batch_size: 16 } } })).toThrow(
      /actor_rollout_ref\.actor\.ppo_mini_batch_size: must be at most data\.train_batch_size \(8\)/,
    );
    expect(() => parseVerlConfig({ actor_rollout_ref: { actor: { ppo_micro_batch_size: 4, ppo_micro_batch_size_per_gpu: 4 } } })).toThrow(
      /ppo_micro_batch_size: give ppo_micro_batch_size or ppo_micro_batch_size_per_gpu, not both/,
    );
    expect(() => parseVerlConfig([])).toThrow(/^config: /);
  });

  it("refuses an unresolved interpolation under a key it reads, not under one it ignores", () => {
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a Hydra interpolation
    expect(() => parseVerlConfig({ critic: { ppo_epochs: "${oc.select:actor_rollout_ref.actor.ppo_epochs,1}" } })).toThrow(
      /^critic\.ppo_epochs: .* is unresolved: give the resolved config/,
    );
    expect(() => parseVerlConfig({ actor_rollout_ref: { rollout: { name: "???" } } })).not.toThrow(); // ignored
    expect(() => parseVerlConfig({ actor_rollout_ref: { model: { path: "???" } } })).toThrow(/model\.path: "\?\?\?" is unresolved/);
  });
});

describe("the mapping", () => {
  it("counts rows: mini-batches of prompts x n, micro-batches of rows; the critic inherits the actor's", () => {
    const s = settingsOf({
      algorithm: { adv_estimator: "gae" },
      data: { train_batch_size: 16 },
      actor_rollout_ref: { rollout: { n: 6 }, actor: { ppo_mini_batch_size: 4, ppo_micro_batch_size: 3, ppo_epochs: 2 } },
      critic: { ppo_micro_batch_size_per_gpu: 2, model: { path: "critic-dir" } },
    });
    expect(s.ppo).toMatchObject({ batchSize: 16, nSamples: 6, miniBatchSize: 24, microBatchSize: 3, ppoEpochs: 2 });
    expect(s.critic).toMatchObject({ modelPath: "critic-dir", miniBatchSize: 24, microBatchSize: 2, ppoEpochs: 2 });
    expect(settingsOf({ critic: { enable: false } }).critic).toBeNull();
    expect(settingsOf({ algorithm: { adv_estimator: "rloo" }, critic: { enable: true } }).critic).not.toBeNull();
  });

  it("falls back to clip_ratio for a one-sided ratio left null, and turns the KL loss off with use_kl_loss", () => {
    const s = settingsOf({
      actor_rollout_ref: { actor: { clip_ratio: 0.3, clip_ratio_low: null, clip_ratio_high: 0.28, kl_loss_coef: 0.05 } },
    });
    expect(s.ppo.loss).toMatchObject({ clipRatioLow: 0.3, clipRatioHigh: 0.28, klLossCoef: 0 });
    const kl = settingsOf({ actor_rollout_ref: { actor: { use_kl_loss: true, kl_loss_coef: 0.05, kl_loss_type: "k2" } } });
    expect(kl.ppo.loss).toMatchObject({ klLossCoef: 0.05, klLossType: "k2" });
  });

  it("takes the deprecated warmup_style over lr_scheduler_type, as verl does", () => {
    const optim = (o: object) => settingsOf({ actor_rollout_ref: { actor: { optim: o } } }).lrSchedule.type;
    expect(optim({ lr_scheduler_type: "cosine" })).toBe("cosine");
    expect(optim({ lr_scheduler_type: "constant", warmup_style: "cosine" })).toBe("cosine");
    expect(() => settingsOf({ critic: { optim: { lr_scheduler_type: "cosine" } } })).toThrow(
      /critic\.optim\.lr_scheduler_type: .*constant/,
    );
  });

  it("verl's learning-rate schedule, worked by hand", () => {
    const constant = { warmupSteps: 4, type: "constant", minLrRatio: 0, numCycles: 0.5 } as const;
    expect([1, 2, 3, 4, 5, 6].map((s) => verlLrFactor(s, 6, constant))).toEqual([0, 0.25, 0.5, 0.75, 1, 1]);
    const cosine = { warmupSteps: 1, type: "cosine", minLrRatio: 0, numCycles: 0.5 } as const;
    const f = [1, 2, 3, 4, 5].map((s) => verlLrFactor(s, 5, cosine));
    const h = Math.SQRT1_2;
    [0, 1, (1 + h) / 2, 0.5, (1 - h) / 2].forEach((v, i) => expect(f[i]).toBeCloseTo(v, 12));
    // min_lr_ratio 0.1 lifts the curve: 0.45 cos + 0.55
    expect(verlLrFactor(4, 5, { ...cosine, minLrRatio: 0.1 })).toBeCloseTo(0.55, 12);
    expect(verlLrFactor(5, 5, { ...cosine, minLrRatio: 0.1 })).toBeCloseTo(0.55 - 0.45 * h, 12);
    expect(warmupSteps({ warmupSteps: -1, warmupRatio: 0.1 }, 25)).toBe(2);
    expect(warmupSteps({ warmupSteps: 3, warmupRatio: 0.5 }, 25)).toBe(3);
  });

  it("verl's step count: total_epochs passes of whole batches", () => {
    expect(stepsOfEpochs(2, 4096, 8)).toBe(1024);
    expect(stepsOfEpochs(3, 10, 4)).toBe(6);
    expect(() => stepsOfEpochs(1, 3, 4)).toThrow(/trainer\.total_epochs: 3 training tasks make no full batch of 4/);
  });
});
