/**
 * The watchdog's deadline index (storage.ts `listDueRollouts`): each storage keeps every rollout's
 * deadline current on its writes, so a scan reads only what is due. A random workload of every write
 * that moves a deadline (starts, retries, spans, status and config changes, expiries; on libSQL also a
 * second connection's writes) is checked after each step against the deadlines computed from scratch
 * from the rows (decisions.ts `watchdogDeadline`), and each scan must change exactly the rollouts that
 * are due. Plus the in-memory index itself: ordering, cursors, moves and removals against a sorted list.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { DeadlineIndex } from "../../src/store/deadline-index.ts";
import { watchdogDeadline } from "../../src/store/decisions.ts";
import type { LightningStoreCore } from "../../src/store/core.ts";
import { InMemoryLightningStore, LibsqlLightningStore } from "../../src/store/index.ts";
import type { DueRollout, Storage } from "../../src/store/storage.ts";
import { ManualClock, spanFromAttributes, type AttemptStatus, type RolloutStatus } from "../../src/types/index.ts";
import { rng } from "../wasm/random.ts";

const dir = mkdtempSync(join(tmpdir(), "watchdog-deadlines-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const storageOf = (store: LightningStoreCore): Storage => (store as unknown as { storage: Storage }).storage;

/** Everything the storage's index says is due at all (every finite deadline is before +Infinity), page by page. */
async function indexed(store: LightningStoreCore, page = 7): Promise<DueRollout[]> {
  const out: DueRollout[] = [];
  for (let after: DueRollout | null = null; ; ) {
    const cursor: DueRollout | null = after;
    const got: DueRollout[] = await storageOf(store).tx("r", (t) => t.listDueRollouts(Number.POSITIVE_INFINITY, cursor, page));
    out.push(...got);
    if (got.length < page) return out;
    after = got[got.length - 1]!;
  }
}

/** The same, computed from scratch from the rows. */
async function fromRows(store: LightningStoreCore, ids: readonly string[]): Promise<DueRollout[]> {
  const out: DueRollout[] = [];
  for (const id of ids) {
    const r = (await store.getRolloutById(id))!;
    const deadline = watchdogDeadline(r, await store.getLatestAttempt(id));
    if (deadline !== null) out.push({ rollout_id: id, deadline });
  }
  return out.sort((a, b) => a.deadline - b.deadline || (a.rollout_id < b.rollout_id ? -1 : 1));
}

const configs = [
  {},
  { timeout_seconds: 5 },
  { unresponsive_seconds: 2 },
  { timeout_seconds: 7.5, unresponsive_seconds: 1.5 },
  { timeout_seconds: 0.3 },
];
const attemptStatuses: AttemptStatus[] = ["running", "succeeded", "failed", "unresponsive", "timeout"];
const rolloutStatuses: RolloutStatus[] = ["running", "preparing", "queuing", "cancelled", "succeeded"];

async function workload(store: LightningStoreCore, clock: ManualClock, seed: number, other?: LightningStoreCore): Promise<void> {
  const rnd = rng(seed).next;
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const ids: string[] = [];
  let spans = 0;
  let scans = 0;
  for (let step = 0; step < 300; step++) {
    const id = ids.length > 0 ? pick(ids) : null;
    // A second connection's writes (libSQL): the first must drop what it cached and still see the deadline move.
    const via = other !== undefined && rnd() < 0.2 ? other : store;
    const op = rnd();
    if (op < 0.15 || id === null) {
      ids.push((await via.startRollout(step, { config: pick(configs), worker_id: rnd() < 0.5 ? "w1" : null })).rollout_id);
    } else if (op < 0.22) {
      ids.push(
        (
          await via.enqueueRollout(step, {
            config: { ...pick(configs), max_attempts: 3, retry_condition: ["timeout", "unresponsive", "failed"] },
          })
        ).rollout_id,
      );
      await via.dequeueManyRollouts({ limit: 2, worker_id: "w2" });
    } else if (op < 0.4) {
      const latest = await via.getLatestAttempt(id);
      if (latest)
        await via.addSpan(spanFromAttributes({ rollout_id: id, attempt_id: latest.attempt_id, sequence_id: ++spans, name: "hb" }));
    } else if (op < 0.5) {
      await via.updateAttempt(id, "latest", { status: pick(attemptStatuses) }).catch((e: unknown) => expect(e).toBeInstanceOf(Error));
    } else if (op < 0.55) {
      await via
        .updateAttempt(id, "latest", { last_heartbeat_time: clock.now() + rnd() })
        .catch((e: unknown) => expect(e).toBeInstanceOf(Error));
    } else if (op < 0.63) {
      await via.updateRollout(id, { status: pick(rolloutStatuses) });
    } else if (op < 0.68) {
      await via.updateRollout(id, { config: pick(configs) });
    } else if (op < 0.73) {
      await via.startAttempt(id, { worker_id: "w3" });
    } else if (op < 0.9) {
      clock.advance(rnd() * 2);
    } else {
      // Exactly the rollouts due now change (their deadline leaves the index or moves on), nothing else.
      const due = (await fromRows(store, ids)).filter((d) => d.deadline < clock.now()).map((d) => d.rollout_id);
      const before = new Map(await Promise.all(ids.map(async (x) => [x, JSON.stringify(await store.getRolloutById(x))] as const)));
      expect(await store.runWatchdog()).toBe(due.length);
      for (const x of ids) {
        const changed = before.get(x) !== JSON.stringify(await store.getRolloutById(x));
        expect(changed, `rollout ${x}: due ${due.includes(x)}, changed ${changed}`).toBe(due.includes(x));
      }
      scans += due.length > 0 ? 1 : 0;
    }
    expect(await indexed(store), `after step ${step}`).toEqual(await fromRows(store, ids));
  }
  // The workload reached what it is meant to check.
  expect(scans).toBeGreaterThan(2);
  expect((await fromRows(store, ids)).length).toBeGreaterThan(0);
}

describe("watchdog deadlines kept by every write", () => {
  it.each([1, 2, 3])("in-memory storage, seed %i", async (seed) => {
    const clock = new ManualClock(1000);
    const store = new InMemoryLightningStore({ clock, scanDebounceSeconds: 1e9 });
    await workload(store, clock, seed);
    await store.close();
  });

  it.each([1, 2])("libSQL file with a second connection writing, seed %i", async (seed) => {
    const clock = new ManualClock(1000);
    const url = `file:${join(dir, `w${seed}.db`)}`;
    const store = await LibsqlLightningStore.open(url, { clock, scanDebounceSeconds: 1e9 });
    const other = await LibsqlLightningStore.open(url, { clock, scanDebounceSeconds: 1e9 });
    await workload(store, clock, seed, other);
    await store.close();
    await other.close();
  });
});

describe("DeadlineIndex (the in-memory storage's)", () => {
  it("returns what is due in (deadline, id) order, page after page, through sets, moves and removals", () => {
    const rnd = rng(7).next;
    const index = new DeadlineIndex();
    const truth = new Map<string, number>();
    for (let step = 0; step < 3000; step++) {
      const id = `r${Math.floor(rnd() * 200)}`;
      // Few distinct deadlines: many ties, which the id orders.
      const deadline = rnd() < 0.3 ? null : Math.floor(rnd() * 50);
      index.set(id, deadline);
      if (deadline === null) truth.delete(id);
      else truth.set(id, deadline);
      if (step % 100 !== 0) continue;
      const now = rnd() * 55;
      const expected = [...truth]
        .filter(([, d]) => d < now)
        .map(([rollout_id, d]) => ({ rollout_id, deadline: d }))
        .sort((a, b) => a.deadline - b.deadline || (a.rollout_id < b.rollout_id ? -1 : 1));
      const got: DueRollout[] = [];
      for (let after: DueRollout | null = null; ; ) {
        const page = index.due(now, after, 9);
        got.push(...page);
        if (page.length < 9) break;
        after = page[page.length - 1]!;
      }
      expect(got).toEqual(expected);
      expect(index.size).toBe(truth.size);
      for (const [id2, d] of truth) expect(index.get(id2)).toBe(d);
    }
  });
});
