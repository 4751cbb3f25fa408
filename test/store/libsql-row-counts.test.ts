/**
 * The row counters that answer the libSQL store's totals (schema.ts `rowCounts`: changes held back with
 * the rows and written at the commit, triggers for the rest): after every kind of write — inserts,
 * duplicates left out, status changes and retries, a write rolled back inside a shared commit (also one
 * that had written out the counts held back so far), another connection's writes, rows deleted by hand
 * with plain SQL — each total the store reports (statistics, a status filter's total, a whole table's
 * total) equals a COUNT(*) of the rows.
 */
import { createRequire } from "node:module";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { newAttempt } from "../../src/store/core/steps.ts";
import { LibsqlLightningStore, type LightningStore } from "../../src/store/index.ts";
import { openDriver, parseDbUrl } from "../../src/store/libsql/driver.ts";
import { applyMigrations } from "../../src/store/libsql/migrate.ts";
import { MIGRATIONS } from "../../src/store/libsql/migrations/index.ts";
import { LibsqlStorage } from "../../src/store/libsql/storage.ts";
import { Rollout, RolloutStatus, newRolloutId, spanFromAttributes } from "../../src/types/index.ts";

interface NativeDb {
  prepare(sql: string): { raw(on: boolean): { all(...args: unknown[]): unknown[][] }; run(...args: unknown[]): unknown };
  close(): void;
}
const Database = createRequire(import.meta.url)("libsql") as new (path: string) => NativeDb;

const dir = mkdtempSync(join(tmpdir(), "libsql-row-counts-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** COUNT(*) of the rows themselves, on a connection of its own. */
function counted(path: string, sql: string, ...args: unknown[]): number {
  const db = new Database(path);
  try {
    return Number(
      db
        .prepare(sql)
        .raw(true)
        .all(...args)[0]![0],
    );
  } finally {
    db.close();
  }
}

async function expectExactTotals(store: LightningStore, path: string): Promise<void> {
  const stats = await store.statistics();
  expect({
    rollouts: stats.total_rollouts,
    attempts: stats.total_attempts,
    spans: stats.total_spans,
    resources: stats.total_resources,
    workers: stats.total_workers,
  }).toEqual(
    Object.fromEntries(
      ["rollouts", "attempts", "spans", "resources", "workers"].map((t) => [t, counted(path, `SELECT COUNT(*) FROM "${t}"`)]),
    ),
  );
  for (const s of RolloutStatus.options) {
    const rows = counted(path, `SELECT COUNT(*) FROM "rollouts" WHERE "status" = ?`, s);
    expect({ s, total: (await store.queryRollouts({ status_in: [s], limit: 0 })).total }).toEqual({ s, total: rows });
    // A page cut short by its limit: the total still counts every match.
    expect({ s, total: (await store.queryRollouts({ status_in: [s], limit: 1 })).total }).toEqual({ s, total: rows });
  }
  const some = ["succeeded", "failed", "succeeded", "queuing"] as const;
  expect((await store.queryRollouts({ status_in: [...some], limit: 0 })).total).toBe(
    counted(path, `SELECT COUNT(*) FROM "rollouts" WHERE "status" IN ('succeeded', 'failed', 'queuing')`),
  );
  expect((await store.queryRollouts({ status_in: [], limit: 0 })).total).toBe(0);
  expect((await store.queryRollouts({ limit: 1 })).total).toBe(stats.total_rollouts);
  expect((await store.queryWorkers({ limit: 0 })).total).toBe(stats.total_workers);
  expect((await store.queryResources({ limit: 0 })).total).toBe(stats.total_resources);
}

describe("libSQL row counters", () => {
  it("every total equals a count of the rows after every kind of write, by this connection, another one, or plain SQL", async () => {
    const path = join(dir, "counts.db");
    const a = await LibsqlLightningStore.open(`file:${path}`, { scanDebounceSeconds: 0 });
    const b = await LibsqlLightningStore.open(`file:${path}`, { scanDebounceSeconds: 0 });
    await expectExactTotals(a, path);

    const res = await a.addResources({ llm: { resource_type: "llm", endpoint: "http://a/v1", model: "m" } });
    await a.updateResources(res.resources_id, { llm: { resource_type: "llm", endpoint: "http://b/v1", model: "m" } });
    await a.addResources({ llm: { resource_type: "llm", endpoint: "http://c/v1", model: "m" } });
    const queued = await a.enqueueManyRollouts(
      Array.from({ length: 12 }, (_, i) => ({ input: { i }, config: { max_attempts: 2, retry_condition: ["failed" as const] } })),
    );
    const claimed = await a.dequeueManyRollouts({ limit: 8, worker_id: "w1" });
    const span = (k: number, r = claimed[0]!) =>
      spanFromAttributes({ rollout_id: r.rollout_id, attempt_id: r.attempt.attempt_id, sequence_id: k, name: `s${k}` });
    await a.addManySpans([1, 2, 3, 4, 5].map((k) => span(k)));
    // Duplicates are left out, and not counted.
    await a.addManySpans([span(1), span(2), span(6)]);
    await Promise.all(claimed.slice(1, 4).map((r, i) => a.addSpan(span(i + 1, r))));
    await a.updateAttempt(claimed[0]!.rollout_id, "latest", { status: "succeeded" });
    await a.updateAttempt(claimed[1]!.rollout_id, "latest", { status: "failed" }); // retried: requeuing
    await a.updateAttempt(claimed[2]!.rollout_id, "latest", { status: "running" });
    await a.updateRollout(claimed[3]!.rollout_id, { status: "cancelled" });
    await a.updateRollout(queued[11]!.rollout_id, { status: "cancelled" });
    await a.startRollout({ q: "by hand" }, { worker_id: "w2" });
    await a.updateWorker("w3", { gpu: 1 });
    await expectExactTotals(a, path);

    // A write that fails after writing rows, inside a commit shared with others, is rolled back and not counted.
    const failing = await Promise.allSettled([
      a.updateWorker("w4"),
      a.enqueueManyRollouts([{ input: 1 }, { input: { big: 10n } }]),
      a.updateAttempt(claimed[4]!.rollout_id, "latest", { status: "succeeded" }),
    ]);
    expect(failing.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    await expectExactTotals(a, path);

    // Another connection's writes are counted too, and seen by this one.
    await b.enqueueManyRollouts([{ input: "b1" }, { input: "b2" }]);
    await b.dequeueRollout({ worker_id: "wb" });
    await b.updateAttempt(claimed[5]!.rollout_id, "latest", { status: "failed" });
    await b.addManySpans([span(7), span(1), span(1, claimed[6]!)]);
    await expectExactTotals(a, path);
    await expectExactTotals(b, path);

    // Rows deleted by hand (a cleanup outside the store) leave the counters right.
    const db = new Database(path);
    db.prepare(`DELETE FROM "spans" WHERE "name" IN ('s1', 's2')`).run();
    db.prepare(`DELETE FROM "rollouts" WHERE "status" = 'cancelled'`).run();
    db.prepare(`DELETE FROM "workers" WHERE "worker_id" = 'w3'`).run();
    db.close();
    await expectExactTotals(a, path);
    expect((await a.queryRollouts({ status_in: ["cancelled"], limit: 0 })).total).toBe(0);

    await a.close();
    await b.close();
  });

  it("a call that wrote out the counts held back in its commit, then failed: the other calls' counts stay, its own go", async () => {
    const path = join(dir, "failed-call.db");
    const driver = await openDriver(parseDbUrl(`file:${path}`), { busyTimeoutMs: 1000 });
    await applyMigrations(driver, MIGRATIONS);
    const storage = new LibsqlStorage(driver);
    const [r1, r2, r3] = [1, 2, 3].map(() => Rollout.parse({ rollout_id: newRolloutId(), input: "x", start_time: 1 }));
    // Three calls in one group commit; the second's count() writes out what is held back so far (the
    // first call's rollout and its own changes) inside its savepoint, then the call fails.
    const results = await Promise.allSettled([
      storage.tx("w", (t) => t.insertRollouts([r1!])),
      storage.tx("w", async (t) => {
        t.insertRollouts([r2!]);
        await t.updateRollout(r1!.rollout_id, { status: "running" });
        await t.insertAttempt(newAttempt(r2!.rollout_id, 1, null, 1));
        expect(await t.counts()).toMatchObject({ rollouts: 2, attempts: 1 });
        throw new Error("fails after its count");
      }),
      storage.tx("w", (t) => t.insertRollouts([r3!])),
    ]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    await storage.close();
    const store = await LibsqlLightningStore.open(`file:${path}`);
    expect((await store.queryRollouts({ status_in: ["queuing"], limit: 0 })).total).toBe(2);
    await expectExactTotals(store, path);
    await store.close();
  });
});
