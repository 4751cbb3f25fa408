/**
 * Group commit in the embedded driver: concurrent write transactions share one commit, each in its own
 * savepoint, and calls still take effect in the order they were made.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LibsqlLightningStore } from "../../src/store/index.ts";
import { NotFoundError } from "../../src/types/index.ts";

const dir = mkdtempSync(join(tmpdir(), "libsql-group-"));
let n = 0;
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.each([":memory:", "file:"])("LibsqlLightningStore group commit (%s)", (kind) => {
  const open = () => LibsqlLightningStore.open(kind === "file:" ? `file:${join(dir, `g${n++}.db`)}` : ":memory:");

  it("calls made without awaiting take effect in call order: a read sees every write requested before it", async () => {
    const store = await open();
    const seen: number[] = [];
    const calls: Promise<unknown>[] = [];
    for (let i = 0; i < 100; i++) {
      calls.push(store.updateWorker("w", { i }));
      calls.push(store.getWorkerById("w").then((w) => seen.push((w!.heartbeat_stats as { i: number }).i)));
    }
    await Promise.all(calls);
    expect(seen).toEqual([...Array(100).keys()]);
    await store.close();
  });

  it("a write that fails inside a shared commit rolls back alone; the others are committed", async () => {
    const store = await open();
    const rollouts = await store.enqueueManyRollouts(Array.from({ length: 20 }, (_, i) => ({ input: i })));
    const results = await Promise.allSettled(
      rollouts.flatMap((r, i) => [
        store.updateRollout(r.rollout_id, { metadata: { i } }),
        // Fails after nothing was written, inside the same group as its neighbours.
        store.updateAttempt(r.rollout_id, "latest", { status: "running" }),
      ]),
    );
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(20);
    for (const r of results.filter((x): x is PromiseRejectedResult => x.status === "rejected"))
      expect(r.reason).toBeInstanceOf(NotFoundError);
    const stored = await store.queryRollouts({ limit: -1 });
    expect(stored.items.map((r) => r.metadata)).toEqual(rollouts.map((_, i) => ({ i })));
    await store.close();
  });

  it("a write that fails after writing rows rolls back to its savepoint, between committed neighbours", async () => {
    const store = await open();
    // 2,000 rollouts take several INSERT statements; the last one cannot be stored.
    const requests = Array.from({ length: 2000 }, (_, i) => ({ input: i === 1999 ? { big: 10n } : i }));
    const results = await Promise.allSettled([
      ...Array.from({ length: 10 }, (_, i) => store.updateWorker(`before-${i}`)),
      store.enqueueManyRollouts(requests),
      ...Array.from({ length: 10 }, (_, i) => store.updateWorker(`after-${i}`)),
    ]);
    expect(results.map((r) => r.status)).toEqual([...Array(10).fill("fulfilled"), "rejected", ...Array(10).fill("fulfilled")]);
    const stats = await store.statistics();
    expect(stats.total_rollouts).toBe(0);
    expect(stats.total_workers).toBe(20);
    expect(await store.dequeueRollout()).toBeNull();
    await store.close();
  });
});
