/**
 * The default `unresponsive_seconds` the Trainer gives rollouts it enqueues (docs/departures.md#21):
 * its value from the runners' heartbeat interval, how it fills only what the caller left unset, and
 * the relay of worker heartbeats to the attempts they run, which keeps a live runner's long rollout
 * from being judged unresponsive.
 */
import { describe, expect, it } from "vitest";
import { algo } from "../../src/algorithm/index.ts";
import { LitAgent } from "../../src/runner/index.ts";
import { InMemoryLightningStore } from "../../src/store/index.ts";
import { defaultUnresponsiveSeconds, relayWorkerHeartbeats } from "../../src/trainer/heartbeat-relay.ts";
import { withRolloutDefaults } from "../../src/trainer/rollout-defaults.ts";
import { Trainer } from "../../src/trainer/index.ts";
import { ManualClock, ValidationError, type Rollout } from "../../src/types/index.ts";

describe("defaultUnresponsiveSeconds", () => {
  it("is six heartbeat intervals, at least 30 s, and none without heartbeats", () => {
    expect(defaultUnresponsiveSeconds(10)).toBe(60);
    expect(defaultUnresponsiveSeconds(20)).toBe(120);
    expect(defaultUnresponsiveSeconds(1)).toBe(30);
    expect(defaultUnresponsiveSeconds(0)).toBeNull();
    expect(defaultUnresponsiveSeconds(-1)).toBeNull();
  });

  it("the Trainer takes it from its runner's heartbeat interval; the option overrides or disables it", () => {
    expect(new Trainer().defaultUnresponsiveSeconds).toBe(60);
    expect(new Trainer({ runner: { type: "LitAgentRunner", heartbeat_interval: 15 } }).defaultUnresponsiveSeconds).toBe(90);
    expect(new Trainer({ runner: { type: "LitAgentRunner", heartbeat_interval: 0 } }).defaultUnresponsiveSeconds).toBeNull();
    expect(new Trainer({ defaultUnresponsiveSeconds: 12 }).defaultUnresponsiveSeconds).toBe(12);
    expect(new Trainer({ defaultUnresponsiveSeconds: null }).defaultUnresponsiveSeconds).toBeNull();
    expect(() => new Trainer({ defaultUnresponsiveSeconds: -1 })).toThrow(ValidationError);
    expect(() => new Trainer({ defaultUnresponsiveSeconds: Number.NaN })).toThrow(ValidationError);
  });
});

describe("withRolloutDefaults", () => {
  it("fills unresponsive_seconds where the caller left it unset, and keeps what the caller set (null included)", async () => {
    const store = new InMemoryLightningStore();
    const view = withRolloutDefaults(store, { unresponsive_seconds: 60 });
    const plain = await view.enqueueRollout("a");
    const nullConfig = await view.enqueueRollout("b", { mode: "val", config: null });
    const partial = await view.enqueueRollout("c", { config: { max_attempts: 3, retry_condition: ["failed"] } });
    const explicit = await view.enqueueRollout("d", { config: { unresponsive_seconds: 5 } });
    const none = await view.enqueueRollout("e", { config: { unresponsive_seconds: null } });
    const many = await view.enqueueManyRollouts([
      { input: "f" },
      { input: "g", config: { timeout_seconds: 9 } },
      { input: "h", config: { unresponsive_seconds: null } },
    ]);
    const started = await view.startRollout("i", { worker_id: "Worker-7" });
    const stored = async (r: Rollout) => (await store.getRolloutById(r.rollout_id))!.config;
    expect((await stored(plain)).unresponsive_seconds).toBe(60);
    expect((await store.getRolloutById(nullConfig.rollout_id))!.mode).toBe("val");
    expect((await stored(nullConfig)).unresponsive_seconds).toBe(60);
    expect(await stored(partial)).toMatchObject({ unresponsive_seconds: 60, max_attempts: 3, retry_condition: ["failed"] });
    expect((await stored(explicit)).unresponsive_seconds).toBe(5);
    expect((await stored(none)).unresponsive_seconds).toBeNull();
    expect(await Promise.all(many.map(async (r) => (await stored(r)).unresponsive_seconds))).toEqual([60, 60, null]);
    expect((await stored(many[1]!)).timeout_seconds).toBe(9);
    expect((await stored(started)).unresponsive_seconds).toBe(60);
    expect(started.attempt.worker_id).toBe("Worker-7");
  });

  it("everything else goes to the store itself; bad input still gets the store's errors", async () => {
    const store = new InMemoryLightningStore();
    const view = withRolloutDefaults(store, { unresponsive_seconds: 60 });
    expect(view.capabilities).toBe(store.capabilities);
    expect(view.constructor).toBe(InMemoryLightningStore);
    await view.enqueueRollout("a");
    expect((await view.queryRollouts()).total).toBe(1);
    expect(await view.dequeueRollout({ worker_id: "Worker-0" })).not.toBeNull();
    await expect(view.enqueueRollout("x", { config: { max_attempts: 0 } })).rejects.toThrow(ValidationError);
    await expect(view.enqueueManyRollouts("nope" as never)).rejects.toThrow(ValidationError);
    expect((await store.queryRollouts()).total).toBe(1);
  });
});

describe("relayWorkerHeartbeats", () => {
  /** A store on a hand-driven clock; a worker holding one attempt of a rollout with unresponsive_seconds 30. */
  async function busyWorker() {
    const clock = new ManualClock(1000);
    const store = new InMemoryLightningStore({ clock, scanDebounceSeconds: 0 });
    const { rollout_id } = await store.enqueueRollout("task", { config: { unresponsive_seconds: 30 } });
    const claimed = (await store.dequeueRollout({ worker_id: "Worker-0" }))!;
    const latest = async () => (await store.getLatestAttempt(rollout_id))!;
    return { clock, store, rollout_id, attempt_id: claimed.attempt.attempt_id, latest };
  }

  it("copies a busy worker's newer heartbeat onto the attempt it runs, so a live runner's rollout is not judged unresponsive", async () => {
    const { clock, store, rollout_id, latest } = await busyWorker();
    for (let t = 10; t <= 100; t += 10) {
      clock.set(1000 + t);
      await store.updateWorker("Worker-0", {});
      expect(await relayWorkerHeartbeats(store)).toBe(1);
      await store.runWatchdog();
    }
    expect((await latest()).last_heartbeat_time).toBe(1100);
    expect((await latest()).status).toBe("preparing");
    expect((await store.getRolloutById(rollout_id))!.status).toBe("preparing");
    // Nothing newer to copy: nothing written.
    expect(await relayWorkerHeartbeats(store)).toBe(0);
    // The runner goes silent: past unresponsive_seconds after its last heartbeat, the watchdog steps in.
    clock.set(1131);
    expect(await relayWorkerHeartbeats(store)).toBe(0);
    await store.runWatchdog();
    expect((await latest()).status).toBe("unresponsive");
    expect((await store.getRolloutById(rollout_id))!.status).toBe("failed");
  });

  it("without the relay the same live runner's attempt is judged unresponsive (worker heartbeats alone do not count)", async () => {
    const { clock, store, latest } = await busyWorker();
    for (let t = 10; t <= 40; t += 10) {
      clock.set(1000 + t);
      await store.updateWorker("Worker-0", {});
      await store.runWatchdog();
    }
    expect((await latest()).status).toBe("unresponsive");
  });

  it("leaves finished attempts, other workers' attempts and idle workers alone, and never moves a heartbeat back", async () => {
    const { clock, store, rollout_id, attempt_id, latest } = await busyWorker();
    clock.set(1020);
    await store.updateWorker("Worker-0", {});
    // A span wrote a newer attempt heartbeat than the worker's.
    await store.updateAttempt(rollout_id, attempt_id, { last_heartbeat_time: 1025 });
    expect(await relayWorkerHeartbeats(store)).toBe(0);
    expect((await latest()).last_heartbeat_time).toBe(1025);
    // Finished: the worker turns idle and its attempt keeps its heartbeat.
    await store.updateAttempt(rollout_id, attempt_id, { status: "succeeded" });
    clock.set(1030);
    await store.updateWorker("Worker-0", {});
    expect(await relayWorkerHeartbeats(store)).toBe(0);
    expect((await latest()).last_heartbeat_time).toBe(1025);
    // A heartbeat from a worker that is not the attempt's: ignored.
    const other = await store.enqueueRollout("other");
    await store.dequeueRollout({ worker_id: "Worker-1" });
    await store.updateAttempt(other.rollout_id, "latest", { worker_id: "Worker-2" });
    clock.set(1040);
    await store.updateWorker("Worker-1", {});
    expect(await relayWorkerHeartbeats(store)).toBe(0);
    expect((await store.getLatestAttempt(other.rollout_id))!.last_heartbeat_time).toBeNull();
  });
});

describe("Trainer.fit", () => {
  it("rollouts the algorithm enqueues without a limit get the default; ones with their own keep it", async () => {
    const configs: Rollout["config"][] = [];
    class Agent extends LitAgent<string> {
      override async rollout() {
        return 1;
      }
    }
    const trainer = new Trainer({
      nRunners: 1,
      runner: { type: "LitAgentRunner", poll_interval: 0.01, heartbeat_interval: 20 },
      tracer: { type: "DummyTracer" },
      algorithm: algo(async ({ store }) => {
        await store.addResources({ p: { resource_type: "prompt_template", template: "t", engine: "f-string" } });
        const rs = [await store.enqueueRollout("a"), await store.enqueueRollout("b", { config: { unresponsive_seconds: 7 } })];
        const done = await store.waitForRollouts({ rollout_ids: rs.map((r) => r.rollout_id), timeout: 60 });
        expect(done.map((r) => r.status)).toEqual(["succeeded", "succeeded"]);
        configs.push(...done.map((r) => r.config));
      }),
    });
    await trainer.fit(new Agent());
    expect(configs.map((c) => c.unresponsive_seconds)).toEqual([120, 7]);
    // What the store holds, not only what the algorithm saw.
    const stored = (await trainer.store.queryRollouts()).items.map((r) => r.config.unresponsive_seconds).sort();
    expect(stored).toEqual([120, 7]);
  }, 60_000);

  it("a rollout that writes no span for longer than its unresponsive_seconds succeeds while its runner sends heartbeats", async () => {
    // Limits generous against a loaded machine: heartbeats every 0.25 s, judged silent after 6 s, a 9 s rollout.
    class SlowAgent extends LitAgent<string> {
      override async rollout() {
        // No span, no reward: nothing but heartbeats reaches the store while it runs.
        await new Promise((r) => setTimeout(r, 9000));
      }
    }
    let finished: Rollout[] = [];
    const trainer = new Trainer({
      nRunners: 1,
      runner: { type: "LitAgentRunner", poll_interval: 0.01, heartbeat_interval: 0.25 },
      tracer: { type: "DummyTracer" },
      defaultUnresponsiveSeconds: 6,
      watchdogIntervalSeconds: 0.1,
      algorithm: algo(async ({ store }) => {
        await store.addResources({ p: { resource_type: "prompt_template", template: "t", engine: "f-string" } });
        const r = await store.enqueueRollout("slow");
        finished = await store.waitForRollouts({ rollout_ids: [r.rollout_id], timeout: 120 });
      }),
    });
    await trainer.fit(new SlowAgent());
    expect(finished.map((r) => [r.status, r.config.unresponsive_seconds])).toEqual([["succeeded", 6]]);
    const attempts = (await trainer.store.queryAttempts(finished[0]!.rollout_id)).items;
    expect(attempts.map((a) => a.status)).toEqual(["succeeded"]);
    // The attempt's heartbeat came from the worker's (no span was written).
    expect(attempts[0]!.last_heartbeat_time).not.toBeNull();
    expect((await trainer.store.querySpans(finished[0]!.rollout_id)).total).toBe(0);
  }, 120_000);
});
