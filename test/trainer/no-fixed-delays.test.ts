/**
 * `Trainer.fit` with `Baseline` and its defaults (runner poll interval 5 s, Baseline polling interval
 * 5 s, a queue of 4) on a dozen trivial tasks waits on no fixed delay: it finishes while a fake clock
 * stands still. A runner that slept its poll interval, or a Baseline that slept while the queue was full,
 * would wait on a fake timer that never fires; the real-time guard then ends the test.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { Baseline } from "../../src/algorithm/index.ts";
import { rollout } from "../../src/runner/index.ts";
import { InMemoryLightningStore } from "../../src/store/index.ts";
import { emitReward } from "../../src/tracer/index.ts";
import { Trainer } from "../../src/trainer/index.ts";

afterEach(() => vi.useRealTimers());

describe("Trainer.fit with Baseline's defaults", () => {
  it("finishes a dozen trivial rollouts without a fake timer firing", async () => {
    const realSetTimeout = globalThis.setTimeout;
    const realClearTimeout = globalThis.clearTimeout;
    const store = new InMemoryLightningStore();
    const dequeues = vi.spyOn(store, "dequeueRollout");
    const trainer = new Trainer({
      algorithm: new Baseline({ spanVerbosity: "none" }),
      nRunners: 2,
      store,
      initialResources: { prompt: { resource_type: "prompt_template", template: "{q}", engine: "f-string" } },
    });
    const agent = rollout(async function trivial(task: { q: string }, prompt_template: unknown) {
      emitReward(task.q && prompt_template ? 1 : 0);
    });
    // setImmediate stays real: the store and the strategies take their turns through it.
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval"] });
    let guard: ReturnType<typeof setTimeout> | undefined;
    const stalled = new Promise<"stalled">((resolve) => {
      guard = realSetTimeout(() => resolve("stalled"), 30_000);
    });
    const tasks = Array.from({ length: 12 }, (_, i) => ({ q: `task ${i}` }));
    const outcome = await Promise.race([trainer.fit(agent, tasks).then(() => "finished" as const), stalled]);
    realClearTimeout(guard);
    expect(outcome, `fit waited on a timer (${vi.getTimerCount()} pending)`).toBe("finished");
    const rollouts = (await store.queryRollouts()).items;
    expect(rollouts.filter((r) => r.status === "succeeded")).toHaveLength(12);
    // Woken by each enqueue instead of polling: a couple of empty dequeues per runner, not one per task.
    expect(dequeues.mock.calls.length).toBeLessThanOrEqual(12 + 2 * 4);
  }, 60_000);
});
