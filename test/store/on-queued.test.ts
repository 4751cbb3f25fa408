/**
 * `onQueued`: a store tells its listeners when a rollout is enqueued (one or many) or requeued (a failed
 * attempt with attempts left), after the commit, so that an idle runner in the same process can wake.
 */
import { describe, expect, it } from "vitest";
import type { LightningStore } from "../../src/store/base.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { LibsqlLightningStore } from "../../src/store/libsql/index.ts";

describe.each([
  ["InMemoryLightningStore", async () => new InMemoryLightningStore() as LightningStore],
  ["LibsqlLightningStore(:memory:)", async () => (await LibsqlLightningStore.open(":memory:")) as LightningStore],
])("%s onQueued", (_name, open) => {
  it("calls its listeners on enqueue and requeue, once committed, until removed", async () => {
    const store = await open();
    try {
      // What each call saw waiting: called after the commit, the queued rollouts are there to dequeue.
      const waiting: Promise<number>[] = [];
      const off = store.onQueued!(() => {
        waiting.push(store.queryRollouts({ status_in: ["queuing", "requeuing"] }).then((q) => q.total));
      });
      const seen = () => Promise.all(waiting);
      await store.enqueueRollout({ n: 1 });
      await store.enqueueManyRollouts([{ input: { n: 2 } }, { input: { n: 3 } }]);
      const claimed = await store.dequeueRollout();
      await store.dequeueManyRollouts({ limit: 2 });
      expect(await seen()).toEqual([1, 3]);
      // A failed attempt with attempts left puts its rollout back in the queue.
      await store.updateRollout(claimed!.rollout_id, { config: { max_attempts: 2, retry_condition: ["failed"] } });
      await store.updateAttempt(claimed!.rollout_id, claimed!.attempt.attempt_id, { status: "failed" });
      expect(await seen()).toEqual([1, 3, 1]);
      off();
      await store.enqueueRollout({ n: 4 });
      expect(waiting).toHaveLength(3);
    } finally {
      await store.close();
    }
  });
});
