/**
 * `agl train`: settings from flags and a config file; a LoRA-GRPO run on a Hugging Face folder (the
 * calc SFT model exported with exportHf, loaded back through the HF loader) that raises the training
 * reward, with real KL and clip-fraction figures; the output folder (adapter in PEFT layout, checkpoints,
 * metrics, reward curve) and resuming a run from it.
 */
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../../src/cli/agl.ts";
import { runTraining } from "../../src/cli/train.ts";
import { parseTrainArgs, TrainConfigSchema, type TrainConfig } from "../../src/cli/train-config.ts";
import { flattenParams } from "../../src/model/params.ts";
import { exportHf, loadCheckpoint, loadLoraCheckpoint, loadPeftAdapter, loadPretrained, loraLayout } from "../../src/model/index.ts";
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

  it("resumes from the last checkpoint and refuses a folder that holds another run", async () => {
    const out = join(dir, "run-b");
    const first = await runTraining(settings({ out, steps: 2, checkpointEvery: 1, lr: 1e-2 }), { log: () => {} });
    expect(first.startStep).toBe(0);
    const atTwo = await loadLoraCheckpoint(join(out, "checkpoints/step-2"), (await loadPretrained(join(dir, "model"))).config);
    const logs: string[] = [];
    const second = await runTraining(settings({ out, steps: 3, checkpointEvery: 1, lr: 1e-2 }), { log: (m) => logs.push(m) });
    expect(second.startStep).toBe(2);
    expect(logs.join("\n")).toMatch(/resuming after step 2/);
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
