/**
 * `agl train --agent-match`: a two-agent rollout (solver, then checker) trains on the solver's calls
 * only, one row per rollout; the policy server serves the solver with the LoRA adapter and the checker
 * with the frozen base; the flag is read and a bad pattern is named.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { LlmProxyTraceToTriplet } from "../../src/adapter/index.ts";
import { ppoOptionsOf, runTraining } from "../../src/cli/train.ts";
import { fitRowLimits, parseTrainArgs, TrainConfigSchema } from "../../src/cli/train-config.ts";
import { exportHf, loadCheckpoint } from "../../src/model/index.ts";
import type { PolicyTrainer } from "../../src/model/train-types.ts";
import type { ModelPolicy } from "../../src/proxy/policy.ts";
import { openStore } from "../../src/store/index.ts";
import { tasksWithSignal } from "../demo/calc-signal.ts";

let dir = "";
const noFile = (): string => {
  throw new Error("no config file in this test");
};

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "agl-train-agents-"));
  const ckpt = await loadCheckpoint("examples/calc/checkpoint-sft", undefined, { optimizer: false });
  await exportHf(join(dir, "model"), { config: ckpt.config, params: ckpt.params });
  const tasks = await tasksWithSignal(2);
  await writeFile(join(dir, "train.jsonl"), tasks.map((t) => JSON.stringify(t)).join("\n"));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("agl train --agent-match", () => {
  it("reads the pattern, gives it to the adapter, and names a bad one", () => {
    const base = ["--model", "m", "--agent", "a", "--data", "d"];
    const r = parseTrainArgs([...base, "--agent-match", "^write$"], noFile);
    if (r.help) throw new Error("not help");
    expect(r.config.agentMatch).toBe("^write$");
    const options = ppoOptionsOf(fitRowLimits(r.config, 768), {
      trainer: {} as PolicyTrainer,
      policy: {} as ModelPolicy,
      lora: true,
      startStep: 0,
    });
    expect((options.adapter as LlmProxyTraceToTriplet).agentMatch).toBe("^write$");
    expect(TrainConfigSchema.parse({ model: "m", agent: "a", data: "d" }).agentMatch).toBeNull();
    expect(() => parseTrainArgs([...base, "--agent-match", "(write"], noFile)).toThrow(/--agent-match: not a regular expression/);
  });

  it("trains on the matched agent's calls only, and serves the other agent on the frozen base", async () => {
    const out = join(dir, "run");
    const config = TrainConfigSchema.parse({
      model: join(dir, "model"),
      agent: "test/fixtures/train/two-agent-calc-agent.ts",
      data: join(dir, "train.jsonl"),
      out,
      device: "cpu",
      loraR: 4,
      loraAlpha: 8,
      batch: 2,
      group: 4,
      steps: 2,
      lr: 1e-2,
      maxPrompt: 58,
      maxResponse: 6,
      valEvery: 0,
      runners: 2,
      progress: false,
      seed: 1,
      agentMatch: "^solver$",
    });
    const r = await runTraining(config, { log: () => {} });
    const steps = r.reports.filter((x) => x.kind === "step");
    expect(steps).toHaveLength(2);
    // 2 tasks x 4 rollouts, two calls each: one row per rollout (the solver's), not two
    for (const s of steps) expect(s.rows).toBe(8);
    expect(steps[1]!.updates).toBeGreaterThan(0);

    const store = await openStore(`file:${join(out, "store.db")}`);
    try {
      const rollouts = (await store.queryRollouts({})).items.filter(
        (x) => (x.metadata as Record<string, unknown>)?.kind !== "grpo-metrics",
      );
      expect(rollouts.length).toBe(16);
      const served: Record<string, boolean[]> = { solver: [], checker: [] };
      for (const ro of rollouts)
        for (const s of (await store.querySpans(ro.rollout_id)).items)
          if (s.name === "litellm_request")
            served[s.attributes["gen_ai.agent.name"] as string]!.push(s.attributes["lightning.policy.adapter"] as boolean);
      expect(served.solver!.length).toBe(16);
      expect(served.checker!.length).toBe(16);
      expect(served.solver!.every((x) => x === true)).toBe(true);
      expect(served.checker!.every((x) => x === false)).toBe(true);
    } finally {
      await store.close();
    }
  }, 600_000);
});
