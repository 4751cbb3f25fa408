/** Bundle lifecycle of the strategies (docs/trainer.md#execution-strategies): grace, cancel, abandon, errors, Ctrl+C. */
import { describe, expect, it } from "vitest";
import { AbortError, LocalEvent } from "../../src/runner/index.ts";
import { InMemoryLightningStore } from "../../src/store/index.ts";
import { captureLogs } from "../../src/tracer/index.ts";
import { SharedMemoryExecutionStrategy, runUntilCompletedOrCanceled } from "../../src/trainer/index.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("runUntilCompletedOrCanceled", () => {
  it("returns the bundle's value when it finishes first", async () => {
    expect(await runUntilCompletedOrCanceled("b", async () => 7, new LocalEvent(), 1)).toBe(7);
  });

  it("after stop, waits the grace period for a bundle that finishes by itself", async () => {
    const event = new LocalEvent();
    const logs = captureLogs();
    const p = runUntilCompletedOrCanceled(
      "b",
      async () => {
        await sleep(50);
        return "done";
      },
      event,
      1,
    );
    event.set();
    expect(await p).toBe("done");
    logs.stop();
    expect(logs.text()).toContain("Bundle finished by itself during grace period");
  });

  it("aborts a bundle that overstays the grace period, and abandons one that ignores the abort", async () => {
    const event = new LocalEvent();
    const logs = captureLogs();
    let sawAbort = false;
    const cooperative = runUntilCompletedOrCanceled(
      "coop",
      (signal) =>
        new Promise((_, reject) => {
          signal.addEventListener("abort", () => {
            sawAbort = true;
            reject(new AbortError("stopped"));
          });
        }),
      event,
      0.05,
    );
    const stubborn = runUntilCompletedOrCanceled("stubborn", () => new Promise(() => {}), event, 0.05);
    event.set();
    expect(await cooperative).toBeNull();
    expect(sawAbort).toBe(true);
    expect(await stubborn).toBeNull();
    logs.stop();
    expect(logs.text()).toContain("Graceful delay elapsed; canceling bundle task...");
    expect(logs.text()).toContain("stubborn did not stop after cancellation; abandoning task");
  });

  it("re-throws other errors", async () => {
    await expect(
      runUntilCompletedOrCanceled(
        "b",
        async () => {
          throw new Error("bad");
        },
        new LocalEvent(),
        1,
      ),
    ).rejects.toThrow("bad");
  });
});

describe("SharedMemoryExecutionStrategy", () => {
  it("a failing runner stops everything and its error is re-raised after cleanup", async () => {
    const s = new SharedMemoryExecutionStrategy({ nRunners: 3, mainThread: "algorithm", gracefulDelay: 0.1 });
    let algorithmSawStop = false;
    const run = s.execute(
      async (_store, event) => {
        algorithmSawStop = await event.wait(5);
      },
      async (_store, id) => {
        if (id === 1) throw new Error("runner 1 broke");
        await sleep(10);
      },
      new InMemoryLightningStore(),
    );
    await expect(run).rejects.toThrow("runner 1 broke");
    expect(algorithmSawStop).toBe(true);
  });

  it("Ctrl+C sets the stop event; execute returns normally", async () => {
    const s = new SharedMemoryExecutionStrategy({ nRunners: 2, mainThread: "algorithm", gracefulDelay: 0.1 });
    const stoppedRunners: number[] = [];
    const logs = captureLogs();
    const run = s.execute(
      async (_store, event) => {
        await event.wait();
      },
      async (_store, id, event) => {
        await event.wait();
        stoppedRunners.push(id);
      },
      new InMemoryLightningStore(),
    );
    await sleep(30);
    process.emit("SIGINT");
    await run;
    logs.stop();
    expect(stoppedRunners.sort()).toEqual([0, 1]);
    expect(logs.text()).toContain("KeyboardInterrupt received on main thread");
    expect(process.listenerCount("SIGINT")).toBe(0);
  });

  it("abandons runners that outlive the join timeout", async () => {
    const s = new SharedMemoryExecutionStrategy({ nRunners: 1, mainThread: "algorithm", gracefulDelay: 0.05, joinTimeout: 0.05 });
    const logs = captureLogs();
    await s.execute(
      async () => {},
      () => new Promise(() => {}),
      new InMemoryLightningStore(),
    );
    logs.stop();
    expect(logs.text()).toMatch(/runner-0 did not stop after cancellation|Threads still alive after/);
  });
});
