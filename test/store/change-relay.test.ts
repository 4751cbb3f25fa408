/**
 * `onChange` / `wake`: what one store object's commits woke, passed to another store object on the same
 * file (as the workers of `agl store --workers N` pass it over IPC), wakes the other's waits at once
 * instead of at its next poll.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LibsqlLightningStore, type StoreChange } from "../../src/store/index.ts";

const dir = mkdtempSync(join(tmpdir(), "change-relay-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("change relay between store objects on one file", () => {
  it("a wait on one store object returns as soon as the other finishes the rollout and relays it", async () => {
    const url = `file:${join(dir, "wake.db")}`;
    // Polls so rare that only the relay can end the wait in time.
    const writer = await LibsqlLightningStore.open(url, { waitPollSeconds: 60 });
    const waiter = await LibsqlLightningStore.open(url, { waitPollSeconds: 60 });
    try {
      writer.onChange((change) => waiter.wake(change));
      const r = await writer.startRollout("task");
      const wait = waiter.waitForRollouts({ rollout_ids: [r.rollout_id], timeout: 10 });
      await new Promise((resolve) => setTimeout(resolve, 100));
      const t0 = Date.now();
      await writer.updateAttempt(r.rollout_id, r.attempt.attempt_id, { status: "succeeded" });
      const done = await wait;
      expect(done.map((x) => [x.rollout_id, x.status])).toEqual([[r.rollout_id, "succeeded"]]);
      expect(Date.now() - t0).toBeLessThan(5_000);
    } finally {
      await writer.close();
      await waiter.close();
    }
  }, 20_000);

  it("tells finished rollouts and queued ones, not commits that woke nothing; a relayed change is not told again", async () => {
    const url = `file:${join(dir, "told.db")}`;
    const a = await LibsqlLightningStore.open(url);
    const b = await LibsqlLightningStore.open(url);
    try {
      const toldByA: StoreChange[] = [];
      const toldByB: StoreChange[] = [];
      a.onChange((c) => {
        toldByA.push({ finished: [...c.finished], queued: c.queued });
        b.wake(c);
      });
      b.onChange((c) => toldByB.push(c));
      const queued = await a.enqueueRollout("q");
      const r = await a.startRollout("s");
      await a.updateAttempt(r.rollout_id, r.attempt.attempt_id, { metadata: { note: 1 } });
      await a.updateAttempt(r.rollout_id, r.attempt.attempt_id, { status: "failed" });
      expect(toldByA).toEqual([
        { finished: [], queued: true },
        { finished: [r.rollout_id], queued: false },
      ]);
      expect(toldByB).toEqual([]);
      expect(queued.status).toBe("queuing");
    } finally {
      await a.close();
      await b.close();
    }
  });
});
