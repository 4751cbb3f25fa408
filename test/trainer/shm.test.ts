/** Trainer.fit / dev with the shared-memory strategy, end to end on an in-memory store. */
import { describe, expect, it } from "vitest";
import { Baseline, algo } from "../../src/algorithm/index.ts";
import { LitAgent } from "../../src/runner/index.ts";
import { InMemoryLightningStore } from "../../src/store/index.ts";
import { captureLogs, emitReward } from "../../src/tracer/index.ts";
import { SharedMemoryExecutionStrategy, Trainer } from "../../src/trainer/index.ts";
import { arithmeticAgent, goodTemplate, makeTasks } from "../../examples/arithmetic/agent.ts";

const fastRunner = { type: "LitAgentRunner", poll_interval: 0.01, heartbeat_interval: 0 };

describe("Trainer with the shared-memory strategy", () => {
  it("fit: Baseline drives every train and val sample through several runners", async () => {
    const store = new InMemoryLightningStore();
    const baseline = new Baseline({ pollingInterval: 0.05, maxQueueLength: 2, spanVerbosity: "key_values" });
    const trainer = new Trainer({
      algorithm: baseline,
      nRunners: 3,
      store,
      runner: fastRunner,
      initialResources: { prompt: goodTemplate },
    });
    const tasks = makeTasks(12);
    const logs = captureLogs();
    await trainer.fit(arithmeticAgent, tasks.slice(0, 8), { valDataset: tasks.slice(8) });
    logs.stop();
    const rollouts = (await store.queryRollouts()).items;
    expect(rollouts).toHaveLength(12);
    expect(rollouts.every((r) => r.status === "succeeded")).toBe(true);
    expect(rollouts.map((r) => r.mode)).toEqual([...Array(8).fill("train"), ...Array(4).fill("val")]);
    expect(rollouts.map((r) => r.input)).toEqual(tasks);
    // Resources were published under "default" and every rollout names them.
    expect(new Set(rollouts.map((r) => r.resources_id))).toEqual(new Set(["default"]));
    // Each worker has its own runner: attempts were spread across labels.
    const workers = new Set<string>();
    for (const r of rollouts) for (const a of (await store.queryAttempts(r.rollout_id)).items) workers.add(a.worker_id!);
    expect([...workers].every((w) => /^Worker-[0-2]$/.test(w))).toBe(true);
    // Every runner polled the store under its own label (which of them got the 12 tasks is up to timing).
    const labels = (await store.queryWorkers()).items.map((w) => w.worker_id).sort();
    expect(labels).toEqual(["Worker-0", "Worker-1", "Worker-2"]);
    for (const r of rollouts) {
      const spans = (await store.querySpans(r.rollout_id)).items;
      expect(spans.map((s) => s.name)).toEqual(["arithmetic.turn", "agentlightning.operation", "agentlightning.annotation"]);
      expect(spans.at(-1)!.attributes["agentlightning.reward.0.value"]).toBe(1);
    }
    expect(baseline.finished).toHaveLength(12);
    const text = logs.text();
    expect(text).toMatch(/\[Rollout ro-[0-9a-f]{12}\] Finished with status succeeded in \d+\.\d\d seconds\./);
    expect(text).toMatch(/\[Rollout ro-\w+ \| Attempt 1\] ID: at-\w+\. Status: succeeded\. Worker: Worker-\d/);
    expect(text).toMatch(/#\d+ \(agentlightning.annotation\) From \d{4}-.*Attributes: \{/);
    expect(text).toContain("Adapted data: []");
  });

  it("dev uses Baseline by default and refuses a non-fast algorithm", async () => {
    const store = new InMemoryLightningStore();
    const trainer = new Trainer({
      store,
      runner: fastRunner,
      initialResources: { prompt: goodTemplate },
      strategy: new SharedMemoryExecutionStrategy(),
    });
    await trainer.dev(arithmeticAgent, makeTasks(2));
    expect((await store.queryRollouts({ status_in: ["succeeded"] })).total).toBe(2);
    const slow = new Trainer({ algorithm: algo(async () => {}) });
    await expect(slow.dev(arithmeticAgent, [])).rejects.toThrow(/requires an algorithm that inherits from FastAlgorithm/);
  });

  it("an algorithm error propagates out of fit and stops the runners; a failing agent does not", async () => {
    const store = new InMemoryLightningStore();
    class Failing extends LitAgent<number> {
      override rollout(): never {
        throw new Error("agent failure");
      }
    }
    const ok = new Trainer({
      store,
      runner: fastRunner,
      nRunners: 2,
      algorithm: algo(async ({ store: s }) => {
        await s.addResources({ prompt: goodTemplate });
        const r = await s.enqueueRollout(1);
        await s.waitForRollouts({ rollout_ids: [r.rollout_id], timeout: 10 });
      }),
    });
    await ok.fit(new Failing());
    expect((await store.queryRollouts()).items.map((r) => r.status)).toEqual(["failed"]);
    const bad = new Trainer({
      runner: fastRunner,
      nRunners: 2,
      algorithm: algo(async () => {
        throw new Error("algorithm failure");
      }),
    });
    await expect(bad.fit(arithmeticAgent)).rejects.toThrow("algorithm failure");
  });

  it("mainThread 'runner': the runner stops after maxRollouts, the algorithm finishes by itself", async () => {
    const store = new InMemoryLightningStore();
    class Agent extends LitAgent<number> {
      override rollout(task: number) {
        emitReward(task);
      }
    }
    const trainer = new Trainer({
      store,
      strategy: "shm",
      runner: { ...fastRunner, max_rollouts: 3 },
      algorithm: algo(async ({ store: s, trainDataset }) => {
        await s.addResources({ prompt: goodTemplate });
        const rs = await s.enqueueManyRollouts(Array.from(trainDataset!, (input) => ({ input })));
        await s.waitForRollouts({ rollout_ids: rs.map((r) => r.rollout_id), timeout: 10 });
      }),
    });
    await trainer.fit(new Agent(), [1, 2, 3]);
    expect((await store.queryRollouts({ status_in: ["succeeded"] })).total).toBe(3);
  });
});
