/** Algorithm base, algo(), batch iteration and Baseline queue control (docs/training.md#algorithms). */
import { describe, expect, it } from "vitest";
import {
  Algorithm,
  Baseline,
  FunctionalAlgorithm,
  algo,
  batchIterOverDataset,
  destructuredKeys,
  withLlmProxy,
} from "../../src/algorithm/index.ts";
import { InMemoryLightningStore } from "../../src/store/index.ts";
import { LightningError, ValidationError } from "../../src/types/index.ts";

describe("Algorithm base", () => {
  it("guards unset parts with upstream's messages", () => {
    const a = algo(() => {});
    expect(() => a.getStore()).toThrow("Store has not been set for this algorithm.");
    expect(() => a.getAdapter()).toThrow("Adapter has not been set for this algorithm.");
    expect(() => a.getTrainer()).toThrow("Trainer has not been set for this agent.");
    expect(a.getLlmProxy()).toBeNull();
    expect(a.getInitialResources()).toBeNull();
    expect(a).toBeInstanceOf(Algorithm);
  });

  it("withLlmProxy starts a stopped proxy around the call, leaves a running one alone", async () => {
    const events: string[] = [];
    const proxy = (running: boolean) => ({
      running,
      isRunning() {
        return this.running;
      },
      async start() {
        events.push("start");
        this.running = true;
      },
      async stop() {
        events.push("stop");
        this.running = false;
      },
    });
    const a = algo(() => {});
    a.setLlmProxy(proxy(false));
    await withLlmProxy(a, async (p) => void events.push(`body:${p!.isRunning()}`));
    a.setLlmProxy(proxy(true));
    await withLlmProxy(a, async () => void events.push("body2"));
    expect(events).toEqual(["start", "body:true", "stop", "body2"]);
    a.setLlmProxy(null);
    await expect(withLlmProxy(a, async () => 1, { required: true })).rejects.toThrow(LightningError);
  });
});

describe("algo()", () => {
  it("reads which context keys the function takes and passes lazy values", async () => {
    expect(destructuredKeys(({ store, train_dataset: t }: { store: unknown; train_dataset: unknown }) => [store, t])).toEqual([
      "store",
      "trainDataset",
    ]);
    expect(destructuredKeys((ctx: unknown) => ctx)).toBeNull();
    const seen: unknown[] = [];
    const a = algo(async ({ trainDataset, initialResources }) => void seen.push(trainDataset, initialResources));
    expect(a).toBeInstanceOf(FunctionalAlgorithm);
    expect(a.isAsync()).toBe(true);
    // `store` is never read, so its missing value does not matter.
    await a.run([1, 2]);
    expect(seen).toEqual([[1, 2], null]);
    expect(() => a.run([1], [2])).toThrow(/val_dataset is provided but not supported/);
    const noData = algo(({ store }) => void store);
    expect(() => noData.run([1])).toThrow(TypeError);
    expect(() => noData.run()).toThrow("Store has not been set for this algorithm.");
    const store = new InMemoryLightningStore();
    noData.setStore(store);
    expect(() => noData.run()).not.toThrow();
    // Callable, passing straight through.
    const direct = algo((ctx) => void seen.push(ctx.trainDataset));
    await direct({ trainDataset: ["x"] } as never);
    expect(seen.at(-1)).toEqual(["x"]);
    expect(direct.accepts).toBeNull();
    expect(() => direct.run([1], [2])).not.toThrow();
  });
});

describe("batchIterOverDataset", () => {
  it("yields reshuffled whole datasets when the batch is at least as large", () => {
    const it = batchIterOverDataset([1, 2, 3], 5);
    for (let k = 0; k < 3; k++) expect([...it.next().value!].sort()).toEqual([1, 2, 3]);
  });

  it("yields batches of distinct items that cover each epoch", () => {
    const data = Array.from({ length: 10 }, (_, i) => i);
    const it = batchIterOverDataset(data, 4);
    const seen: number[] = [];
    for (let k = 0; k < 20; k++) {
      const b = it.next().value!;
      expect(b).toHaveLength(4);
      expect(new Set(b).size).toBe(4);
      seen.push(...b);
    }
    // 80 draws over 10 items: every item shows up, none more than 10 times (once per epoch, ~8 epochs).
    for (const i of data) {
      const n = seen.filter((x) => x === i).length;
      expect(n).toBeGreaterThan(0);
      expect(n).toBeLessThanOrEqual(10);
    }
  });
});

describe("Baseline", () => {
  it("validates its options", () => {
    expect(() => new Baseline({ trainSplit: 1 })).toThrow(ValidationError);
    expect(() => new Baseline({ spanVerbosity: "all" as never })).toThrow(ValidationError);
  });

  it("never lets more than maxQueueLength + 1 rollouts wait, and enqueues every sample once per epoch", async () => {
    const store = new InMemoryLightningStore();
    const b = new Baseline({ pollingInterval: 0.01, maxQueueLength: 2, nEpochs: 2, spanVerbosity: "none" });
    b.setStore(store);
    let maxWaiting = 0;
    const enqueue = store.enqueueRollout.bind(store);
    store.enqueueRollout = async (input, o) => {
      const r = await enqueue(input, o);
      maxWaiting = Math.max(maxWaiting, (await store.queryRollouts({ status_in: ["queuing"] })).total);
      return r;
    };
    // A slow fake runner finishes queued rollouts one at a time.
    let done = false;
    const worker = (async () => {
      while (!done) {
        const r = await store.dequeueRollout({ worker_id: "w" });
        if (r) await store.updateAttempt(r.rollout_id, r.attempt.attempt_id, { status: "succeeded" });
        await new Promise((res) => setTimeout(res, 5));
      }
    })();
    await b.run(["a", "b", "c", "d"], ["v"]);
    done = true;
    await worker;
    expect(maxWaiting).toBeLessThanOrEqual(3);
    const all = (await store.queryRollouts()).items;
    expect(all.map((r) => [r.input, r.mode])).toEqual([
      ...["a", "b", "c", "d"].map((x) => [x, "train"]),
      ["v", "val"],
      ...["a", "b", "c", "d"].map((x) => [x, "train"]),
      ["v", "val"],
    ]);
    expect(b.finished.map((r) => r.status)).toEqual(Array(10).fill("succeeded"));
  });
});
