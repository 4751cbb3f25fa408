/** The runner loop (docs/runner.md#litagentrunner): claims, hooks, statuses, retries, limits, stopping, heartbeats. */
import { describe, expect, it } from "vitest";
import { Hook, LitAgent, LitAgentRunner, LocalEvent, RuntimeError, startHeartbeatLoop } from "../../src/runner/index.ts";
import { InMemoryLightningStore } from "../../src/store/index.ts";
import { captureLogs, emitReward } from "../../src/tracer/index.ts";
import type { AttemptedRollout, NamedResources } from "../../src/types/index.ts";
import { drain, PROMPT, RecordingHook, storeWithResources } from "./helpers.ts";

class Fn<T> extends LitAgent<T> {
  constructor(private readonly fn: (task: T, resources: NamedResources, rollout: AttemptedRollout) => unknown) {
    super();
  }
  override async rollout(task: T, resources: NamedResources, rollout: AttemptedRollout) {
    return (await this.fn(task, resources, rollout)) as never;
  }
}

describe("hooks", () => {
  it("run in order rollout_start → trace_start → trace_end → rollout_end, hook by hook in registration order", async () => {
    const store = await storeWithResources();
    await store.enqueueRollout(1);
    // Both hooks write into one list, so the cross-hook order is visible.
    const order: string[] = [];
    const a = new RecordingHook("a:", order);
    const b = new RecordingHook("b:", order);
    await drain(store, new Fn(() => 1), 1, [a, b]);
    expect(order).toEqual([
      "a:rollout_start",
      "b:rollout_start",
      "a:trace_start",
      "b:trace_start",
      "a:trace_end",
      "b:trace_end",
      "a:rollout_end(0)",
      "b:rollout_end(0)",
    ]);
  });

  it("a throwing hook is logged and never fails the rollout; trace_end is skipped when the agent throws", async () => {
    const store = await storeWithResources();
    const ok = await store.enqueueRollout(1);
    class Bad extends Hook {
      override async onTraceStart() {
        throw new Error("hook broke");
      }
    }
    const logs = captureLogs();
    await drain(store, new Fn(() => 1), 1, [new Bad()]);
    logs.stop();
    expect((await store.getRolloutById(ok.rollout_id))!.status).toBe("succeeded");
    expect(logs.text()).toContain("Exception during on_trace_start hook");

    const bad = await store.enqueueRollout(2);
    const rec = new RecordingHook();
    await drain(
      store,
      new Fn(() => {
        throw new Error("agent broke");
      }),
      1,
      [rec],
    );
    expect((await store.getRolloutById(bad.rollout_id))!.status).toBe("failed");
    expect(rec.calls).toEqual(["rollout_start", "trace_start", "rollout_end(0)"]);
  });
});

describe("claiming and final status", () => {
  it("claims through dequeue with the worker label and marks the attempt succeeded", async () => {
    const store = await storeWithResources();
    const r = await store.enqueueRollout({ q: "x" }, { mode: "train" });
    const seen: { task: unknown; resources: string[]; attempt: string }[] = [];
    await drain(
      store,
      new Fn(
        (task, resources, rollout) => void seen.push({ task, resources: Object.keys(resources), attempt: rollout.attempt.attempt_id }),
      ),
      1,
    );
    const attempts = (await store.queryAttempts(r.rollout_id)).items;
    expect(attempts).toHaveLength(1);
    expect(attempts[0]).toMatchObject({ status: "succeeded", worker_id: "Worker-0" });
    expect(seen).toEqual([{ task: { q: "x" }, resources: ["prompt"], attempt: attempts[0]!.attempt_id }]);
    expect((await store.getWorkerById("Worker-0"))!.status).toBe("idle");
  });

  it("uses the rollout's own resources version when it names one", async () => {
    const store = await storeWithResources();
    const old = (await store.queryResources()).items[0]!;
    await store.addResources({ other: { resource_type: "llm", endpoint: "http://x", model: "m" } });
    await store.enqueueRollout(1, { resources_id: old.resources_id });
    await store.enqueueRollout(2);
    const keys: string[][] = [];
    await drain(store, new Fn((_t, resources) => void keys.push(Object.keys(resources))), 2);
    expect(keys).toEqual([["prompt"], ["other"]]);
  });

  it("a failing rollout is retried per its config, then succeeds on another attempt", async () => {
    const store = await storeWithResources();
    const retried = await store.enqueueRollout("flaky", { config: { max_attempts: 2, retry_condition: ["failed"] } });
    const once = await store.enqueueRollout("flaky");
    const tries = new Map<string, number>();
    const agent = new Fn((_t, _r, rollout) => {
      const n = (tries.get(rollout.rollout_id) ?? 0) + 1;
      tries.set(rollout.rollout_id, n);
      if (n === 1) throw new Error("first attempt fails");
      emitReward(1);
    });
    await drain(store, agent, 3);
    const a = (await store.queryAttempts(retried.rollout_id)).items;
    expect(a.map((x) => x.status)).toEqual(["failed", "succeeded"]);
    expect((await store.getRolloutById(retried.rollout_id))!.status).toBe("succeeded");
    expect((await store.querySpans(retried.rollout_id, { attempt_id: "latest" })).items).toHaveLength(1);
    expect((await store.getRolloutById(once.rollout_id))!.status).toBe("failed");
    expect((await store.queryAttempts(once.rollout_id)).items).toHaveLength(1);
  });

  it("calls trainingRollout for mode train and validationRollout otherwise (val, test, null)", async () => {
    const store = await storeWithResources();
    for (const mode of ["train", "val", "test", null] as const) await store.enqueueRollout(mode, { mode });
    const calls: string[] = [];
    class Modes extends LitAgent<unknown> {
      override trainingRollout(task: unknown) {
        calls.push(`train:${String(task)}`);
      }
      override validationRollout(task: unknown) {
        calls.push(`val:${String(task)}`);
      }
    }
    await drain(store, new Modes(), 4);
    expect(calls).toEqual(["train:train", "val:val", "val:test", "val:null"]);
  });

  it("missing resources fail the attempt, and still count toward maxRollouts", async () => {
    const store = new InMemoryLightningStore();
    const r = await store.enqueueRollout(1);
    await store.enqueueRollout(2);
    const logs = captureLogs();
    await drain(store, new Fn(() => 1), 1);
    logs.stop();
    expect((await store.getRolloutById(r.rollout_id))!.status).toBe("failed");
    expect(logs.text()).toContain("Failed to fetch resources");
    expect((await store.queryRollouts({ status_in: ["queuing"] })).total).toBe(1);
  });
});

describe("limits and stopping", () => {
  it("maxRollouts: processes exactly that many, leaving the rest queued", async () => {
    const store = await storeWithResources();
    for (let i = 0; i < 5; i++) await store.enqueueRollout(i);
    await drain(store, new Fn(() => 1), 3);
    expect((await store.queryRollouts({ status_in: ["succeeded"] })).total).toBe(3);
    expect((await store.queryRollouts({ status_in: ["queuing"] })).total).toBe(2);
  });

  it("the stop event ends an idle loop at once, and a busy one after its current rollout", async () => {
    const store = await storeWithResources();
    const event = new LocalEvent();
    const runner = new LitAgentRunner({ pollInterval: 30, heartbeatInterval: 0 });
    let started!: () => void;
    const inRollout = new Promise<void>((r) => (started = r));
    const agent = new Fn(async () => {
      started();
      await new Promise((r) => setTimeout(r, 50));
      return 1;
    });
    const t0 = performance.now();
    const loop = runner.withRunContext({ agent, store }, (r) => r.iter({ event }));
    await new Promise((r) => setTimeout(r, 30));
    // The runner is asleep for up to 30 s (a rollout enqueued would wake it to work); the event wakes it to stop.
    event.set();
    await loop;
    expect(performance.now() - t0).toBeLessThan(5_000);
    const busy = await store.enqueueRollout("busy");
    await store.enqueueRollout("never");

    event.clear();
    const runner2 = new LitAgentRunner({ pollInterval: 0.01, heartbeatInterval: 0 });
    const loop2 = runner2.withRunContext({ agent, store }, (r) => r.iter({ event }));
    await inRollout;
    event.set();
    await loop2;
    expect((await store.getRolloutById(busy.rollout_id))!.status).toBe("succeeded");
    expect((await store.queryRollouts({ status_in: ["queuing"] })).total).toBe(1);
  });

  it("an AbortSignal abandons the rollout in flight and marks its attempt failed", async () => {
    const store = await storeWithResources();
    const r = await store.enqueueRollout("slow");
    const ac = new AbortController();
    const agent = new Fn(async () => {
      setTimeout(() => ac.abort(), 20);
      await new Promise((res) => setTimeout(res, 10_000));
    });
    const runner = new LitAgentRunner({ pollInterval: 0.01, heartbeatInterval: 0 });
    const t0 = performance.now();
    await runner.withRunContext({ agent, store }, (x) => x.iter({ signal: ac.signal }));
    expect(performance.now() - t0).toBeLessThan(5_000);
    expect((await store.getLatestAttempt(r.rollout_id))!.status).toBe("failed");
  });
});

describe("step and lifecycle", () => {
  it("step runs one rollout directly, with its own resources; errors propagate after the attempt is failed", async () => {
    const store = new InMemoryLightningStore();
    const runner = new LitAgentRunner<number>({ heartbeatInterval: 0 });
    await runner.withRunContext({ agent: new Fn<number>((t) => t * 2), store, workerId: 3 }, async (r) => {
      const done = await r.step(21, { resources: PROMPT, mode: "val" });
      expect(done.status).toBe("succeeded");
      expect(done.mode).toBe("val");
      const spans = (await store.querySpans(done.rollout_id)).items;
      expect(spans.map((s) => s.attributes["agentlightning.reward.0.value"])).toEqual([42]);
      expect((await store.getLatestAttempt(done.rollout_id))!.worker_id).toBe("Worker-3");
    });
    const failing = new LitAgentRunner<number>({ heartbeatInterval: 0 });
    await failing.withRunContext(
      {
        agent: new Fn<number>(() => {
          throw new Error("nope");
        }),
        store,
      },
      async (r) => {
        await expect(r.step(1, { resources: PROMPT })).rejects.toThrow("nope");
      },
    );
    const all = (await store.queryRollouts()).items;
    expect(all.map((x) => x.status).sort()).toEqual(["failed", "succeeded"]);
  });

  it("guards its state and never defines run()", async () => {
    const runner = new LitAgentRunner({ heartbeatInterval: 0 });
    expect(() => runner.getAgent()).toThrow("Agent not initialized. Call init() first.");
    expect(() => runner.getStore()).toThrow(/Store not initialized/);
    expect(runner.getWorkerId()).toBe("Worker-Unknown");
    expect(() => runner.run()).toThrow(RuntimeError);
    const agent = new Fn(() => 1);
    await runner.withRunContext({ agent, store: new InMemoryLightningStore(), workerId: 2 }, (r) => {
      expect(r.getWorkerId()).toBe("Worker-2");
      expect(agent.getRunner()).toBe(r);
      expect(agent.getTracer()).toBe(r.tracer);
    });
    expect(runner.getWorkerId()).toBe("Worker-Unknown");
  });
});

describe("heartbeats", () => {
  it("the runner sends worker telemetry while it runs (both modes)", async () => {
    for (const mode of ["asyncio", "thread"] as const) {
      const store = await storeWithResources();
      const event = new LocalEvent();
      const runner = new LitAgentRunner({ pollInterval: 0.01, heartbeatInterval: 0.05, intervalJitter: 0.01, heartbeatLaunchMode: mode });
      const loop = runner.withRunContext({ agent: new Fn(() => 1), store, workerId: 5 }, (r) => r.iter({ event }));
      await new Promise((r) => setTimeout(r, 300));
      event.set();
      await loop;
      const w = (await store.getWorkerById("Worker-5"))!;
      expect(w.heartbeat_stats).toMatchObject({
        host: expect.any(String),
        cpu_cores: expect.any(Number),
        mem_total_gb: expect.any(Number),
      });
      expect(String(w.heartbeat_stats!.timestamp)).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$/);
      expect(w.last_heartbeat_time).not.toBeNull();
    }
  });

  it("thread mode skips before the first snapshot and warns 'snapshot stale' once per snapshot", async () => {
    const store = new InMemoryLightningStore();
    let n = 0;
    const logs = captureLogs();
    const stop = startHeartbeatLoop({
      store,
      workerLabel: "Worker-9",
      intervalSeconds: 0.05,
      jitterSeconds: 0,
      mode: "thread",
      snapshot: () => {
        n++;
        if (n > 1) throw new Error("sampler broke");
        return { sample: n };
      },
    })!;
    await new Promise((r) => setTimeout(r, 1_500));
    await stop();
    logs.stop();
    expect((await store.getWorkerById("Worker-9"))!.heartbeat_stats).toEqual({ sample: 1 });
    expect(logs.records.filter((r) => r.message.includes("snapshot stale"))).toHaveLength(1);
    expect(logs.text()).toContain("Heartbeat producer: system_snapshot failed");
  });

  it("thread mode warns 'snapshot stale' for a sampler stuck in flight, and stop() does not wait for it", async () => {
    const store = new InMemoryLightningStore();
    let n = 0;
    const logs = captureLogs();
    const stop = startHeartbeatLoop({
      store,
      workerLabel: "Worker-10",
      intervalSeconds: 0.05,
      jitterSeconds: 0,
      mode: "thread",
      snapshot: () => (++n === 1 ? { sample: 1 } : new Promise<Record<string, unknown>>(() => {})),
    })!;
    await new Promise((r) => setTimeout(r, 1_500));
    const stopped = Date.now();
    await stop();
    logs.stop();
    expect(Date.now() - stopped).toBeLessThan(500);
    expect(logs.records.filter((r) => r.message.includes("snapshot stale"))).toHaveLength(1);
  });

  it("thread mode does not blame the sampler when CPU-bound work blocked the event loop", async () => {
    const store = new InMemoryLightningStore();
    let n = 0;
    const logs = captureLogs();
    const stop = startHeartbeatLoop({
      store,
      workerLabel: "Worker-11",
      intervalSeconds: 0.05,
      jitterSeconds: 0,
      mode: "thread",
      // A sampler that takes a timer turn (as reading system stats does): after the block, the consumer's
      // due timer runs while the producer's fresh sample is still in flight.
      snapshot: () => new Promise((r) => setTimeout(() => r({ sample: ++n }), 20)),
    })!;
    await new Promise((r) => setTimeout(r, 100));
    const busyUntil = Date.now() + 1_300; // longer than interval + jitter + 1 s: every snapshot is stale when the loop wakes
    while (Date.now() < busyUntil) {
      /* a training step holding the loop */
    }
    await new Promise((r) => setTimeout(r, 300));
    await stop();
    logs.stop();
    expect(logs.records.filter((r) => r.message.includes("snapshot stale"))).toHaveLength(0);
    const sent = (await store.getWorkerById("Worker-11"))!.heartbeat_stats as { sample: number };
    expect(sent.sample).toBeGreaterThan(2); // heartbeats resumed with fresh snapshots after the block
  });

  it("is off for intervals <= 0, and refuses unknown modes", () => {
    const store = new InMemoryLightningStore();
    expect(startHeartbeatLoop({ store, workerLabel: "w", intervalSeconds: 0, jitterSeconds: 0, mode: "thread" })).toBeNull();
    expect(() => startHeartbeatLoop({ store, workerLabel: "w", intervalSeconds: 1, jitterSeconds: 0, mode: "process" })).toThrow(
      /launch mode/,
    );
  });
});
