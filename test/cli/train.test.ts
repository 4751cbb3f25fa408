/**
 * `agl train`: settings from flags and a config file; a LoRA-GRPO run on a Hugging Face folder (the
 * calc SFT model exported with exportHf, loaded back through the HF loader) that raises the training
 * reward, with real KL and clip-fraction figures; the output folder (adapter in PEFT layout, checkpoints,
 * metrics, reward curve) and resuming a run from it.
 */
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../../src/cli/agl.ts";
import { lrOf, ppoOptionsOf, resolveSteps, runTraining } from "../../src/cli/train.ts";
import { fitRowLimits, parseTrainArgs, TrainConfigSchema, type TrainConfig, usesCritic } from "../../src/cli/train-config.ts";
import type { PolicyTrainer } from "../../src/model/train-types.ts";
import type { ModelPolicy } from "../../src/proxy/policy.ts";
import { flattenParams } from "../../src/model/params.ts";
import {
  exportHf,
  loadCheckpoint,
  loadLoraCheckpoint,
  loadPeftAdapter,
  loadPretrained,
  loadValueCheckpoint,
  loraLayout,
  valueParamsFromPolicy,
} from "../../src/model/index.ts";
import { UsageError } from "../../src/server/config.ts";
import { openStore } from "../../src/store/index.ts";
import { slope, tasksWithSignal } from "../demo/calc-signal.ts";
import { noGpu } from "../gpu/gpu-env.ts";
import { aglCommand, type Runtime } from "../runtimes.ts";

let dir = "";
const noFile = (): string => {
  throw new Error("no config file in this test");
};

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "agl-train-"));
  const ckpt = await loadCheckpoint("examples/calc/checkpoint-sft", undefined, { optimizer: false });
  await exportHf(join(dir, "model"), { config: ckpt.config, params: ckpt.params });
  const tasks = await tasksWithSignal(4);
  await writeFile(join(dir, "train.jsonl"), tasks.map((t) => JSON.stringify(t)).join("\n"));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Elements where two buffers differ in their bits (NaN counts as itself). */
function countDiffering(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let n = 0;
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) n++;
  return n;
}

describe("agl train settings", () => {
  it("reads flags in kebab case, a JSON config file under them, and fills the defaults", () => {
    const file = JSON.stringify({ model: "m", agent: "a.ts", data: "d.jsonl", loraR: 4, lr: 0.5, loraTargets: ["q_proj"] });
    const r = parseTrainArgs(
      ["--config", "c.json", "--lr", "0.01", "--lora-targets", "q_proj,down_proj", "--recompute", "--no-progress"],
      () => file,
    );
    if (r.help) throw new Error("not help");
    expect(r.config).toMatchObject({
      model: "m",
      loraR: 4,
      lr: 0.01,
      loraTargets: ["q_proj", "down_proj"],
      recompute: true,
      progress: false,
    });
    expect(r.config.steps).toBe(20);
    expect(r.config.out).toBe("runs/train");
    expect(parseTrainArgs(["-h"], noFile)).toEqual({ help: true });
  });

  it("names the flag of a bad value and refuses unknown ones", () => {
    const base = ["--model", "m", "--agent", "a", "--data", "d"];
    expect(() => parseTrainArgs([...base, "--lora-targets", "q_proj,lm_head"], noFile)).toThrow(/--lora-targets\[1\]/);
    expect(() => parseTrainArgs([...base, "--steps", "0"], noFile)).toThrow(/--steps/);
    expect(() => parseTrainArgs([...base, "--lr", "fast"], noFile)).toThrow(/--lr must be a number \(got "fast"\)/);
    expect(() => parseTrainArgs([...base, "--device", "tpu"], noFile)).toThrow(/--device/);
    expect(() => parseTrainArgs([...base, "--bogus", "1"], noFile)).toThrow(UsageError);
    expect(() => parseTrainArgs(["--agent", "a", "--data", "d"], noFile)).toThrow(/--model/);
    expect(() => parseTrainArgs(["--config", "c.json"], () => "[1]")).toThrow(/JSON object/);
    expect(() => parseTrainArgs(["--config", "c.json"], () => '{"model": "m", "agent": "a", "data": "d", "typo": 1}')).toThrow(/typo/);
  });

  it("reads the aggregation level as a flag or as Agent Lightning's nested trace_aggregator, and the grouping", () => {
    const base = ["--model", "m", "--agent", "a", "--data", "d"];
    const config = (argv: string[], file = "{}") => {
      const r = parseTrainArgs([...base, "--config", "c.json", ...argv], () => file);
      if (r.help) throw new Error("not help");
      return r.config;
    };
    expect(config([])).toMatchObject({ traceAggregator: { level: "transition" }, grouping: "sample_turn" });
    expect(config(["--trace-aggregator-level", "trajectory", "--grouping", "sample"])).toMatchObject({
      traceAggregator: { level: "trajectory" },
      grouping: "sample",
    });
    expect(config([], '{"trace_aggregator": {"level": "trajectory"}}').traceAggregator).toEqual({ level: "trajectory" });
    expect(config([], '{"traceAggregator": {"level": "trajectory"}}').traceAggregator).toEqual({ level: "trajectory" });
    expect(config(["--trace-aggregator-level", "transition"], '{"trace_aggregator": {"level": "trajectory"}}').traceAggregator).toEqual({
      level: "transition",
    });
    expect(() => config([], '{"trace_aggregator": {"level": "episode"}}')).toThrow(/--trace-aggregator-level: .*transition/);
    expect(() => config([], '{"trace_aggregator": {"level": "trajectory", "debug": true}}')).toThrow(/traceAggregator: .*debug/);
    expect(() => config([], '{"trace_aggregator": {}, "traceAggregator": {}}')).toThrow(/not both/);
    expect(() => config(["--trace-aggregator-level", "episode"])).toThrow(/--trace-aggregator-level/);
    expect(() => config(["--grouping", "turn"])).toThrow(/--grouping/);
  });

  it("full fine-tuning is a flag, and refuses a KL term (no base to compare with)", () => {
    const base = ["--model", "m", "--agent", "a", "--data", "d"];
    const r = parseTrainArgs([...base, "--full-finetune"], noFile);
    if (r.help) throw new Error("not help");
    expect(r.config.fullFinetune).toBe(true);
    expect(() => parseTrainArgs([...base, "--full-finetune", "--kl-coef", "0.1"], noFile)).toThrow(/--kl-coef: .*LoRA/);
  });

  it("answers --help with 0 and a bad command line with 2", async () => {
    expect(await runCli(["train", "--help"])).toBe(0);
    expect(await runCli(["train", "--model"])).toBe(2);
  });
});

describe("agl train with verl's config", () => {
  const calcX = readFileSync("examples/calc-x/verl-config.json", "utf8");
  const required = ["--agent", "a.ts", "--data", "d.jsonl"];
  const parse = (argv: string[], file = calcX): TrainConfig => {
    const r = parseTrainArgs([...required, "--config", "c.json", ...argv], () => file);
    if (r.help) throw new Error("not help");
    return r.config;
  };
  /** The options the PPO algorithm gets (its runtime parts stubbed: only the mapping is checked here). */
  const optionsOf = (c: TrainConfig) =>
    ppoOptionsOf(fitRowLimits(c, 32768), { trainer: {} as PolicyTrainer, policy: {} as ModelPolicy, lora: !c.fullFinetune, startStep: 0 });

  it("loads Agent Lightning's Calc-X config and maps it key by key onto the settings and the PPO options", () => {
    const c = parse([]);
    expect(c).toMatchObject({
      model: "examples/calc-x/model",
      fullFinetune: true, // no lora_rank: verl trains every weight
      loraAlpha: 16,
      recompute: true, // enable_gradient_checkpointing
      totalEpochs: 2,
      batch: 8,
      group: 4,
      epochs: 1,
      miniBatch: 32, // ppo_mini_batch_size 8 prompts x rollout.n 4
      microBatch: 4,
      lr: 1e-6,
      weightDecay: 0.01,
      betas: [0.9, 0.999],
      gradClip: 1,
      lrWarmupSteps: null,
      lrWarmupRatio: 0,
      lrScheduler: "constant",
      klCoef: 0,
      klType: "low_var_kl",
      clipRatio: 0.2,
      clipRatioLow: 0.2,
      clipRatioHigh: 0.3,
      clipRatioC: 3,
      entropyCoeff: 0,
      lossAggMode: "token-mean",
      lossMode: "vanilla",
      maxPrompt: 208,
      maxResponse: 48,
      traceAggregator: { level: "transition" },
      temperature: 1,
      valEvery: 32,
      checkpointEvery: 64,
      advEstimator: "grpo",
      normAdvByStd: true,
      useKlInReward: false,
      critic: { enable: null },
      criticWarmup: 0,
      rolloutDataDir: null,
    });
    // what the trainer keeps as it was: no verl key for them
    expect(c).toMatchObject({ device: "auto", runners: 4, seed: 0, grouping: "sample_turn", out: "runs/train" });
    const o = optionsOf(resolveSteps(c, 4096));
    expect(o).toMatchObject({
      steps: 1024, // 2 epochs x 4096 tasks / 8 per step
      batchSize: 8,
      nSamples: 4,
      ppoEpochs: 1,
      miniBatchSize: 32,
      microBatchSize: 4,
      maxPromptLength: 208,
      maxResponseLength: 48,
      valEvery: 32,
      checkpointEvery: 64,
      normByStd: true,
      trackKl: false,
      advEstimator: "grpo",
      gamma: 1,
      lam: 1,
      useKlInReward: false,
      klPenalty: "kl",
      klCtrl: { type: "fixed", klCoef: 0.001, targetKl: 0.1, horizon: 10000 },
      criticWarmup: 0,
      rolloutDataDir: null,
    });
    expect(o.loss).toEqual({
      lossMode: "vanilla",
      clipCovRatio: 0.0002,
      clipCovLb: 1,
      clipCovUb: 5,
      klCovRatio: 0.0002,
      ppoKlCoef: 0.1,
      clipRatio: 0.2,
      clipRatioLow: 0.2,
      clipRatioHigh: 0.3,
      clipRatioC: 3,
      lossAggMode: "token-mean",
      entropyCoeff: 0,
      klLossCoef: 0,
      klLossType: "low_var_kl",
    });
    expect(o.lrSchedule?.(1, 1024)).toBe(1e-6);
  });

  it("flags override the file's own keys, which override its verl keys", () => {
    const file = JSON.stringify({ ...JSON.parse(calcX), lr: 1e-3, maxPrompt: 100, steps: 7 });
    const fromFile = parse([], file);
    expect(fromFile).toMatchObject({ lr: 1e-3, maxPrompt: 100, steps: 7, totalEpochs: null, maxResponse: 48 });
    const c = parse(["--lr", "1e-4", "--lora-r", "8", "--total-epochs", "3", "--clip-ratio-high", "0.25"], file);
    // --lora-r turns verl's full fine-tuning (lora_rank 0) into LoRA; --total-epochs wins over the file's steps
    expect(c).toMatchObject({ lr: 1e-4, loraR: 8, fullFinetune: false, totalEpochs: 3, clipRatioHigh: 0.25, maxPrompt: 100 });
    expect(parse(["--steps", "5"])).toMatchObject({ steps: 5, totalEpochs: null });
    expect(() => parse(["--steps", "5", "--total-epochs", "1"])).toThrow(/--steps and --total-epochs/);
    // a string `data` is the tasks file beside verl's sections
    const withData = parseTrainArgs(["--agent", "a", "--config", "c.json"], () =>
      JSON.stringify({ ...JSON.parse(calcX), data: "t.jsonl" }),
    );
    expect(withData.help === false && withData.config.data).toBe("t.jsonl");
  });

  it("names the file and the key path of a bad verl config", () => {
    /** The Calc-X config with `value` set at each `path`; the message it is refused with. */
    const bad = (...edits: [string, unknown][]): string => {
      const c = JSON.parse(calcX) as Record<string, unknown>;
      for (const [path, value] of edits) {
        const keys = path.split(".");
        let node = c;
        for (const k of keys.slice(0, -1)) node = (node[k] ??= {}) as Record<string, unknown>;
        node[keys[keys.length - 1]!] = value;
      }
      try {
        parse([], JSON.stringify(c));
      } catch (e) {
        expect(e).toBeInstanceOf(UsageError);
        return (e as Error).message;
      }
      throw new Error("accepted");
    };
    expect(bad(["actor_rollout_ref.actor.ppo_mini_batch", 8])).toMatch(
      /^--config c\.json: actor_rollout_ref\.actor\.ppo_mini_batch: not a key of verl's config/,
    );
    expect(bad(["trainer.val_only", true])).toMatch(/^--config c\.json: trainer\.val_only: true is refused/);
    expect(bad(["data.train_batch_size", 4])).toMatch(
      /actor_rollout_ref\.actor\.ppo_mini_batch_size: must be at most data\.train_batch_size/,
    );
    // a key that sets a setting of the trainer's own layout is refused by that setting's rule
    expect(bad(["actor_rollout_ref.actor.use_kl_loss", true], ["actor_rollout_ref.actor.kl_loss_coef", 0.001])).toMatch(
      /--kl-coef: a KL to the base needs a LoRA adapter/,
    );
  });

  it("takes the PPO family's estimators (gae with its critic), loss modes, KL in the reward, critic warmup and the dump", () => {
    const withAlgorithm = (a: object) => JSON.stringify({ ...JSON.parse(calcX), algorithm: a });
    expect(parse([], withAlgorithm({ adv_estimator: "rloo" })).advEstimator).toBe("rloo");
    // (Calc-X's config fine-tunes every weight: the KL reference is a LoRA run's base)
    expect(parse(["--lora-r", "8"], withAlgorithm({ adv_estimator: "grpo", use_kl_in_reward: true })).useKlInReward).toBe(true);
    expect(parse(["--critic-warmup", "2"]).criticWarmup).toBe(2);
    expect(parse(["--rollout-data-dir", "dump"]).rolloutDataDir).toBe("dump");
    // verl's default estimator is gae, with a critic
    const gae = parse([], withAlgorithm({}));
    expect([gae.advEstimator, usesCritic(gae)]).toEqual(["gae", true]);
    expect(usesCritic(parse([], JSON.stringify({ ...JSON.parse(calcX), critic: { enable: true } })))).toBe(true);
    expect(usesCritic(parse([], withAlgorithm({ adv_estimator: "rloo" })))).toBe(false);
    expect(parse(["--loss-mode", "gspo"]).lossMode).toBe("gspo");
    expect(() => parse(["--full-finetune", "--kl-in-reward"])).toThrow(/--kl-in-reward: a KL penalty in the reward needs a LoRA adapter/);
  });

  it("reads the PPO family's flags and checks their values", () => {
    const c = parse([
      "--no-norm-adv-by-std",
      "--kl-ctrl",
      "adaptive",
      "--kl-ctrl-coef",
      "0.01",
      "--kl-target",
      "0.2",
      "--kl-horizon",
      "500",
      "--kl-penalty",
      "k3",
      "--clip-ratio-low",
      "0.1",
      "--clip-ratio-c",
      "4",
      "--entropy-coeff",
      "0.01",
      "--loss-agg-mode",
      "seq-mean-token-sum",
      "--grad-clip",
      "0.5",
      "--lr-warmup-steps",
      "2",
      "--lr-scheduler",
      "cosine",
      "--lr-min-ratio",
      "0.1",
      "--critic-model",
      "critic-dir",
      "--critic-lr",
      "1e-4",
      "--cliprange-value",
      "0.3",
      "--gamma",
      "0.99",
      "--lam",
      "0.95",
      "--checkpoint-every",
      "0",
    ]);
    expect(c).toMatchObject({
      normAdvByStd: false,
      klCtrl: { type: "adaptive", klCoef: 0.01, targetKl: 0.2, horizon: 500 },
      klPenalty: "k3",
      clipRatioLow: 0.1,
      clipRatioHigh: 0.3,
      clipRatioC: 4,
      entropyCoeff: 0.01,
      lossAggMode: "seq-mean-token-sum",
      gradClip: 0.5,
      lrWarmupSteps: 2,
      lrScheduler: "cosine",
      lrMinRatio: 0.1,
      critic: { enable: null, model: "critic-dir", lr: 1e-4, cliprangeValue: 0.3 },
      gamma: 0.99,
      lam: 0.95,
    });
    const o = optionsOf({ ...c, steps: 9 });
    expect(o).toMatchObject({ normByStd: false, klPenalty: "k3", checkpointEvery: 9 });
    expect(o.loss).toMatchObject({ clipRatioLow: 0.1, clipRatioC: 4, entropyCoeff: 0.01, lossAggMode: "seq-mean-token-sum" });
    expect(() => parse(["--kl-ctrl", "pid"])).toThrow(/--kl-ctrl must be fixed or adaptive/);
    expect(() => parse(["--adv-estimator", "ppo"])).toThrow(/--adv-estimator must be gae, grpo/);
    expect(() => parse(["--clip-ratio-c", "1"])).toThrow(/^--clip-ratio-c: /);
    expect(() => parse(["--critic-lr", "0"])).toThrow(/^--critic-lr: /);
    expect(() => parse(["--kl-target", "0"])).toThrow(/^--kl-target: /);
    expect(() => parse(["--gamma", "2"])).toThrow(/^--gamma: /);
  });

  it("verl's step count and learning-rate schedule, times the late decay", () => {
    const c = parse(["--lr", "1", "--lr-warmup-steps", "2", "--lr-decay-share", "0.5"]);
    // warmup from 0, then the late decay over the last half: 1 - 0.9 x (step - 2) / 2
    [0, 0.5, 1 - 0.9 * 0.5, 0.1].forEach((lr, i) => expect(lrOf(c, i + 1, 4)).toBeCloseTo(lr, 12));
    expect(resolveSteps(c, 20).steps).toBe(4); // 2 epochs x floor(20 / 8)
    expect(() => resolveSteps(c, 7)).toThrow(/--total-epochs 2: trainer\.total_epochs: 7 training tasks make no full batch of 8/);
    expect(resolveSteps(parse(["--steps", "3"]), 7).steps).toBe(3);
  });
});

describe("agl train on a Hugging Face folder", () => {
  const settings = (over: Partial<TrainConfig>): TrainConfig =>
    TrainConfigSchema.parse({
      model: join(dir, "model"),
      agent: "examples/calc/agent.ts",
      data: join(dir, "train.jsonl"),
      device: "cpu",
      loraR: 8,
      loraAlpha: 16,
      batch: 4,
      group: 8,
      maxPrompt: 58,
      maxResponse: 6,
      valEvery: 0,
      runners: 4,
      progress: false,
      ...over,
    });

  it("raises the training reward with LoRA-GRPO and reports real KL and clip figures", async () => {
    const out = join(dir, "run-a");
    const r = await runTraining(settings({ out, steps: 8, lr: 1e-2, epochs: 2, miniBatch: 16, klCoef: 0.01, seed: 1 }), { log: () => {} });
    const steps = r.reports.filter((x) => x.kind === "step");
    expect(steps).toHaveLength(8);
    const rewards = steps.map((s) => s.reward);
    console.log(`[agl train] step rewards: ${rewards.map((x) => x.toFixed(3)).join(" ")}`);
    expect(slope(rewards)).toBeGreaterThan(0);
    const trained = steps.filter((s) => s.updates > 0);
    expect(trained.length).toBeGreaterThan(4);
    // epochs x mini-batches: several updates per step, so the second epoch sees a moved policy
    for (const s of trained) expect(s.updates).toBe(2 * Math.ceil(s.trained_rows / 16));
    expect(trained.some((s) => s.clip_frac > 0)).toBe(true);
    expect(trained.some((s) => s.kl !== 0)).toBe(true);
    // the first step samples from the base itself (B = 0): no KL to it; later steps drift away
    expect(steps[0].kl_ref).toBe(0);
    expect(steps[steps.length - 1].kl_ref).toBeGreaterThan(0);

    // the folder: the last adapter in PEFT layout equals the last checkpoint's
    const model = await loadPretrained(join(dir, "model"));
    const latest = await loadPeftAdapter(r.weightsDir, model.config);
    const ckpt = await loadLoraCheckpoint(join(out, "checkpoints/step-8"), model.config);
    expect(latest.config).toEqual({
      r: 8,
      alpha: 16,
      targetModules: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    });
    expect(Array.from(latest.params)).toEqual(Array.from(ckpt.adapter.params));
    expect(ckpt.optimizer?.step).toBe(steps.reduce((a, s) => a + s.updates - s.skipped_updates, 0));
    const lines = (await readFile(join(out, "metrics.jsonl"), "utf8")).trim().split("\n");
    expect(lines.map((l) => JSON.parse(l).step)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect((await readFile(r.svgPath, "utf8")).startsWith("<svg")).toBe(true);

    // the store in the folder: one bookkeeping rollout with every step, exempt from the unresponsive limit
    const store = await openStore(`file:${join(out, "store.db")}`);
    try {
      const metrics = (await store.queryRollouts({})).items.filter((x) => (x.metadata as Record<string, unknown>)?.kind === "grpo-metrics");
      expect(metrics).toHaveLength(1);
      expect(metrics[0].status).toBe("succeeded");
      expect(metrics[0].config.unresponsive_seconds).toBeNull();
      const spans = (await store.querySpans(metrics[0].rollout_id)).items.filter((x) => x.name === "grpo.step");
      expect(spans.map((x) => x.attributes["grpo.kl_ref"])).toEqual(steps.map((x) => x.kl_ref));
    } finally {
      await store.close();
    }
  }, 600_000);

  it("trains a two-turn agent at trajectory level: one row per rollout, the reward rises", async () => {
    const out = join(dir, "run-trajectory");
    const r = await runTraining(
      settings({
        out,
        agent: "test/fixtures/train/two-turn-calc-agent.ts",
        traceAggregator: { level: "trajectory" },
        maxPrompt: 40,
        maxResponse: 24,
        steps: 10,
        lr: 1e-2,
        epochs: 2,
        miniBatch: 16,
        seed: 1,
      }),
      { log: () => {} },
    );
    const steps = r.reports.filter((x) => x.kind === "step");
    const rewards = steps.map((s) => s.reward);
    console.log(
      `[agl train, trajectory] step rewards: ${rewards.map((x) => x.toFixed(3)).join(" ")}; rows ${steps.map((s) => s.rows).join(" ")}; ` +
        `tokens/step ${steps.map((s) => s.tokens).join(" ")} (${r.seconds.toFixed(1)} s)`,
    );
    expect(slope(rewards)).toBeGreaterThan(0);
    // 4 tasks x 8 rollouts of two calls: one row per rollout (64 at transition level), but for the few whose
    // first answer holds bytes that are not UTF-8: sent back as text they re-render differently, and the
    // second call's prompt no longer extends the first call, so the rollout gives two rows
    for (const s of steps) {
      expect(s.rows).toBeGreaterThanOrEqual(32);
      expect(s.rows).toBeLessThanOrEqual(40);
      expect(s.loss_tokens).toBeLessThan(s.trained_tokens);
    }
  }, 600_000);

  it("full fine-tuning: every weight trains, OUT/model is a Hugging Face folder of the latest weights, and it resumes", async () => {
    const out = join(dir, "run-full");
    const model = await loadPretrained(join(dir, "model"));
    const first = await runTraining(settings({ out, fullFinetune: true, steps: 2, checkpointEvery: 1, lr: 1e-3, seed: 1 }), {
      log: () => {},
    });
    expect(first.weightsDir).toBe(join(out, "model"));
    const steps = first.reports.filter((x) => x.kind === "step");
    expect(steps.reduce((a, s) => a + s.updates - s.skipped_updates, 0)).toBeGreaterThan(0);
    expect(steps.every((s) => s.kl_ref === 0)).toBe(true);
    const atTwo = await loadCheckpoint(join(out, "checkpoints/step-2"));
    const served = await loadPretrained(first.weightsDir);
    expect(served.config).toEqual(model.config);
    expect(served.tokenizer?.encode("Total?")).toEqual(model.tokenizer?.encode("Total?"));
    expect(Array.from(flattenParams(served.config, served.weights))).toEqual(Array.from(atTwo.params));
    expect(Array.from(atTwo.params)).not.toEqual(Array.from(flattenParams(model.config, model.weights)));

    const second = await runTraining(settings({ out, fullFinetune: true, steps: 3, checkpointEvery: 1, lr: 1e-3, seed: 1 }), {
      log: () => {},
    });
    expect(second.startStep).toBe(2);
    const third = second.reports.find((x) => x.kind === "step" && x.step === 3);
    const atThree = await loadCheckpoint(join(out, "checkpoints/step-3"));
    expect(atThree.optimizer?.step).toBe(
      (atTwo.optimizer?.step ?? 0) + (third?.kind === "step" ? third.updates - third.skipped_updates : 0),
    );
    // a LoRA run cannot continue a full fine-tuning folder
    await expect(runTraining(settings({ out, steps: 3, seed: 1 }), { log: () => {} })).rejects.toThrow(
      /another run \(fullFinetune differ\)/,
    );
  }, 600_000);

  it("trains from Agent Lightning's Calc-X verl config: every weight, clip-higher, total_epochs over the tasks", async () => {
    const out = join(dir, "run-verl");
    const args = parseTrainArgs(
      [
        ...["--config", "examples/calc-x/verl-config.json", "--model", join(dir, "model"), "--agent", "examples/calc/agent.ts"],
        ...["--data", join(dir, "train.jsonl"), "--out", out, "--total-epochs", "1", "--batch", "2", "--lr", "1e-3"],
        ...["--max-prompt", "58", "--max-response", "6", "--device", "cpu", "--runners", "2", "--no-progress"],
      ],
      (path) => readFileSync(path, "utf8"),
    );
    if (args.help) throw new Error("not help");
    const r = await runTraining(args.config, { log: () => {} });
    // 1 epoch of 4 tasks in batches of 2; rollout.n 4 per task; lora_rank 0: the whole model
    const steps = r.reports.filter((x) => x.kind === "step");
    expect(steps.map((s) => s.step)).toEqual([1, 2]);
    expect(steps.every((s) => s.rows === 8)).toBe(true);
    expect(steps.reduce((a, s) => a + s.updates - s.skipped_updates, 0)).toBeGreaterThan(0);
    expect(r.weightsDir).toBe(join(out, "model"));
    // save_freq 64: only the last step's checkpoint
    expect(JSON.parse(await readFile(join(out, "progress.json"), "utf8"))).toEqual({ step: 2, checkpoint: "checkpoints/step-2" });
  }, 600_000);

  it("runs another estimator as PPO: RLOO with a KL penalty in the reward, its generations dumped per step", async () => {
    const out = join(dir, "run-rloo");
    const dump = join(dir, "dump-rloo");
    const r = await runTraining(
      settings({
        out,
        steps: 2,
        advEstimator: "rloo",
        useKlInReward: true,
        klCtrl: { type: "adaptive", klCoef: 0.01, targetKl: 0.1, horizon: 100 },
        rolloutDataDir: dump,
      }),
      { log: () => {} },
    );
    const steps = r.reports.filter((x) => x.kind === "step");
    expect(steps.map((s) => s.step)).toEqual([1, 2]);
    const metrics = (steps[1] as { metrics?: Record<string, number> }).metrics ?? {};
    // the adaptive controller moved beta after the first step
    expect(metrics["actor/reward_kl_penalty_coeff"]).toBeGreaterThan(0);
    expect(metrics["actor/reward_kl_penalty_coeff"]).not.toBe(0.01);
    for (const step of [1, 2]) {
      const rows = (await readFile(join(dump, `${step}.jsonl`), "utf8"))
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l));
      expect(rows.length).toBe(steps[step - 1].rows);
      expect(rows.every((x) => x.step === step && typeof x.input === "string" && typeof x.output === "string")).toBe(true);
    }
  }, 600_000);

  it("trains with gae: a critic on the policy's decoder, updated every step before the actor", async () => {
    const out = join(dir, "run-gae");
    const r = await runTraining(settings({ out, steps: 2, advEstimator: "gae", critic: { lr: 1e-3 } as TrainConfig["critic"] }), {
      log: () => {},
    });
    const steps = r.reports.filter((x) => x.kind === "step") as Array<{ metrics?: Record<string, number> }>;
    expect(steps).toHaveLength(2);
    for (const s of steps) {
      expect(Number.isFinite(s.metrics?.["critic/vf_loss"])).toBe(true);
      expect(s.metrics?.["critic/vf_loss"]).toBeGreaterThan(0);
    }
    // the values the advantages came from are the critic's, which moved between the steps
    expect(steps[1].metrics?.["critic/values/mean"]).not.toBe(steps[0].metrics?.["critic/values/mean"]);
  }, 600_000);

  it("gae: each checkpoint holds the critic's state, and a run resumed from step 1's trains step 2 to the uninterrupted run's bits", async () => {
    const out = join(dir, "run-gae-whole");
    const s = settings({ out, steps: 2, checkpointEvery: 1, advEstimator: "gae", critic: { lr: 1e-3 } as TrainConfig["critic"], seed: 1 });
    await runTraining(s, { log: () => {} });
    const model = await loadPretrained(join(dir, "model"));
    const atOne = await loadValueCheckpoint(join(out, "checkpoints/step-1/critic"));
    expect(atOne.optimizer.step).toBeGreaterThan(0);
    // the critic at step 1 is no longer the policy's decoder with a fresh head
    expect(countDiffering(atOne.params, valueParamsFromPolicy(model.config, model.weights, 1))).toBeGreaterThan(0);
    // the folder as a run stopped after step 1's checkpoint leaves it
    const cut = join(dir, "run-gae-cut");
    // not the store's -shm / -wal files: the libSQL binding deletes them when the garbage collector drops the
    // closed store's last statement, which may be during the copy (the WAL was checkpointed into store.db at close)
    await cp(out, cut, { recursive: true, filter: (from) => !/store\.db-(shm|wal)$/.test(from) });
    // a stop between step-2's rename and progress.json leaves step-2 complete but not committed: it is replaced
    await writeFile(join(cut, "checkpoints/step-2/left-over"), "from the stopped run");
    await writeFile(join(cut, "progress.json"), `${JSON.stringify({ step: 1, checkpoint: "checkpoints/step-1" })}\n`);
    const logs: string[] = [];
    const resumed = await runTraining({ ...s, out: cut }, { log: (m) => logs.push(m) });
    expect(resumed.startStep).toBe(1);
    expect(logs.join("\n")).not.toMatch(/afresh/);
    expect(existsSync(join(cut, "checkpoints/step-2/left-over"))).toBe(false);
    const [whole, again] = await Promise.all([out, cut].map((o) => loadValueCheckpoint(join(o, "checkpoints/step-2/critic"))));
    expect(again.optimizer.step).toBe(whole.optimizer.step);
    expect(countDiffering(again.params, whole.params)).toBe(0);
    expect(countDiffering(again.optimizer.m, whole.optimizer.m)).toBe(0);
    expect(countDiffering(again.optimizer.v, whole.optimizer.v)).toBe(0);
    const [wholeAdapter, againAdapter] = await Promise.all(
      [out, cut].map((o) => loadLoraCheckpoint(join(o, "checkpoints/step-2"), model.config)),
    );
    expect(countDiffering(againAdapter.adapter.params, wholeAdapter.adapter.params)).toBe(0);
  }, 600_000);

  it("resumes from the last checkpoint and refuses a folder that holds another run", async () => {
    const out = join(dir, "run-b");
    const first = await runTraining(settings({ out, steps: 2, checkpointEvery: 1, lr: 1e-2 }), { log: () => {} });
    expect(first.startStep).toBe(0);
    const atTwo = await loadLoraCheckpoint(join(out, "checkpoints/step-2"), (await loadPretrained(join(dir, "model"))).config);
    // a stop in the middle of writing step-3 leaves a partial step-3.tmp: the resumed run writes it afresh
    await mkdir(join(out, "checkpoints/step-3.tmp"), { recursive: true });
    await writeFile(join(out, "checkpoints/step-3.tmp/left-over"), "half a checkpoint");
    const logs: string[] = [];
    const second = await runTraining(settings({ out, steps: 3, checkpointEvery: 1, lr: 1e-2 }), { log: (m) => logs.push(m) });
    expect(second.startStep).toBe(2);
    expect(existsSync(join(out, "checkpoints/step-3.tmp"))).toBe(false);
    expect(existsSync(join(out, "checkpoints/step-3/left-over"))).toBe(false);
    expect(logs.join("\n")).toMatch(/resuming after step 2/);
    // the startup line tells where the model being trained answers (and its /metrics)
    expect(logs.join("\n")).toMatch(/, policy server http:\/\/127\.0\.0\.1:\d+\/v1$/m);
    expect(second.reports.filter((x) => x.kind === "step").map((x) => x.step)).toEqual([1, 2, 3]);
    // the resumed optimizer continued from the checkpoint's step count
    const atThree = await loadLoraCheckpoint(join(out, "checkpoints/step-3"), (await loadPretrained(join(dir, "model"))).config);
    const third = second.reports.find((x) => x.kind === "step" && x.step === 3);
    expect(atThree.optimizer?.step).toBe(
      (atTwo.optimizer?.step ?? 0) + (third?.kind === "step" ? third.updates - third.skipped_updates : 0),
    );
    await expect(runTraining(settings({ out, steps: 3, loraR: 4 }), { log: () => {} })).rejects.toThrow(/another run \(loraR differ\)/);
  }, 600_000);
});

describe.skipIf(noGpu)("agl train on WebGPU", () => {
  it("trains the adapter on the WebGPU trainer (bf16 base, recomputed activations) and serves it through the WebGPU engine", async () => {
    const out = join(dir, "run-gpu");
    const r = await runTraining(
      TrainConfigSchema.parse({
        model: join(dir, "model"),
        agent: "examples/calc/agent.ts",
        data: join(dir, "train.jsonl"),
        out,
        device: "webgpu",
        gpuWeights: "bf16",
        recompute: true,
        loraR: 4,
        loraAlpha: 8,
        steps: 2,
        batch: 2,
        group: 8,
        lr: 1e-2,
        maxPrompt: 58,
        maxResponse: 6,
        valEvery: 0,
        runners: 2,
        progress: false,
      }),
      { log: () => {} },
    );
    expect(r.backend).toBe("webgpu");
    const steps = r.reports.filter((x) => x.kind === "step");
    expect(steps).toHaveLength(2);
    const model = await loadPretrained(join(dir, "model"));
    const adapter = await loadPeftAdapter(r.weightsDir, model.config);
    const taken = steps.reduce((a, s) => a + s.updates - s.skipped_updates, 0);
    expect(taken).toBeGreaterThan(0);
    // B starts at zero: the updates moved it
    const bValues = loraLayout(model.config, adapter.config)
      .filter((t) => t.name.endsWith("lora_b"))
      .flatMap((t) => Array.from(adapter.params.subarray(t.offset, t.offset + t.size)));
    expect(bValues.some((x) => x !== 0)).toBe(true);
    expect((await loadLoraCheckpoint(join(out, "checkpoints/step-2"), model.config)).optimizer?.step).toBe(taken);
  }, 600_000);
});

describe("agl train as a command", () => {
  const run = (cmd: string, args: string[]): Promise<{ code: number; output: string }> =>
    new Promise((resolve) => {
      execFile(cmd, args, { timeout: 240_000, env: { ...process.env, NO_COLOR: "1" } }, (err, stdout, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, output: stdout + stderr }),
      );
    });
  const flags = (out: string): string[] => [
    "train",
    "--model",
    join(dir, "model"),
    "--agent",
    "examples/calc/agent.ts",
    "--data",
    join(dir, "train.jsonl"),
    "--out",
    out,
    "--steps",
    "1",
    "--batch",
    "2",
    "--group",
    "2",
    "--max-prompt",
    "58",
    "--max-response",
    "6",
    "--device",
    "cpu",
    "--no-progress",
  ];

  it("runs from the npm binary (a TypeScript agent module through tsx) and names a missing model folder", async () => {
    const ok = await run(process.execPath, ["bin/agl.mjs", ...flags(join(dir, "bin-run"))]);
    expect(ok.output).toMatch(/done: 1 steps on cpu/);
    expect(ok.code).toBe(0);
    const bad = await run(process.execPath, [
      "bin/agl.mjs",
      ...flags(join(dir, "bin-bad")).map((a) => (a === join(dir, "model") ? join(dir, "nowhere") : a)),
    ]);
    expect(bad.code).toBe(1);
    expect(bad.output).toMatch(/nowhere/);
  }, 300_000);

  for (const runtime of ["deno", "bun"] as Runtime[])
    it(`runs under ${runtime}`, async () => {
      const r = await run(...aglCommand(runtime, flags(join(dir, `${runtime}-run`))));
      expect(r.output).toMatch(/done: 1 steps on cpu/);
      expect(r.code).toBe(0);
      expect(JSON.parse(await readFile(join(dir, `${runtime}-run`, "progress.json"), "utf8"))).toEqual({
        step: 1,
        checkpoint: "checkpoints/step-1",
      });
    }, 300_000);
});
