/**
 * "Indexes that serve every query the store makes": every statement a libSQL store prepares while it
 * runs a workload touching each kind of read is recorded, then SQLite's `EXPLAIN QUERY PLAN` is asked
 * how it runs each one. On the tables that grow without bound (spans, attempts) no statement may scan
 * the table or sort its rows in a temporary B-tree: a page of a rollout's spans must cost the page, not
 * the rollout. The same holds for a page of rollouts filtered by one status, and for the watchdog's pages
 * of due rollouts (only they are read, whatever else is unfinished). Migrations are left out: they run
 * once, when a database is upgraded.
 */
import { createRequire } from "node:module";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LibsqlLightningStore } from "../../src/store/index.ts";
import { MIGRATIONS } from "../../src/store/libsql/migrations/index.ts";
import { spanFromAttributes } from "../../src/types/index.ts";

interface NativeDb {
  prepare(sql: string): { raw(on: boolean): { all(...args: unknown[]): unknown[][] } };
  close(): void;
}
const Database = createRequire(import.meta.url)("libsql") as { new (path: string): NativeDb; prototype: NativeDb };

const migrationSql = new Set(MIGRATIONS.flatMap((m) => m.statements));
const dir = mkdtempSync(join(tmpdir(), "libsql-plans-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs `fn` and returns the SQL text of every statement prepared meanwhile (by any connection of this process). */
async function preparedDuring(fn: () => Promise<void>): Promise<Set<string>> {
  const seen = new Set<string>();
  const original = Database.prototype.prepare;
  Database.prototype.prepare = function (this: NativeDb, sql: string) {
    seen.add(sql);
    return original.call(this, sql);
  };
  try {
    await fn();
  } finally {
    Database.prototype.prepare = original;
  }
  return seen;
}

/** A statement the store runs as it works (not a migration or a connection setting). */
const madeByStore = (sql: string): boolean => !/^\s*(CREATE|ALTER|DROP|PRAGMA)/i.test(sql) && !migrationSql.has(sql);

/** SQLite's `EXPLAIN QUERY PLAN` of `sql`, one line per step. */
const queryPlan = (db: NativeDb, sql: string): string[] =>
  db
    .prepare(`EXPLAIN QUERY PLAN ${sql}`)
    .raw(true)
    .all()
    .map((r) => String(r[3]));

describe("libSQL query plans", () => {
  it("reads spans and attempts through an index, in index order, for every query the store makes", async () => {
    const path = join(dir, "plans.db");
    const seen = await preparedDuring(async () => {
      const a = await LibsqlLightningStore.open(`file:${path}`, { scanDebounceSeconds: 0 });
      // A second connection's writes make the first drop its cache, so its reads go to SQL.
      const b = await LibsqlLightningStore.open(`file:${path}`, { scanDebounceSeconds: 0 });
      const poke = (n: number) => b.updateWorker("other", { n });
      const res = await a.addResources({ llm: { resource_type: "llm", endpoint: "http://a/v1", model: "m" } });
      const rollouts = await a.enqueueManyRollouts(
        Array.from({ length: 4 }, (_, i) => ({
          input: { i },
          config: { timeout_seconds: 100, max_attempts: 2, retry_condition: ["failed"] },
        })),
      );
      const ar = (await a.dequeueRollout({ worker_id: "w1" }))!;
      const span = (k: number, name: string) =>
        spanFromAttributes({ rollout_id: ar.rollout_id, attempt_id: ar.attempt.attempt_id, sequence_id: k, name });
      await a.addSpan(span(1, "x"));
      await a.addManySpans([span(2, "y"), span(3, "z")]);
      await a.updateAttempt(ar.rollout_id, "latest", { status: "failed" });
      await poke(1);
      await a.getRolloutById(ar.rollout_id);
      await a.getLatestAttempt(ar.rollout_id);
      await a.getWorkerById("w1");
      await a.getLatestResources();
      await a.getResourcesById(res.resources_id);
      await a.queryAttempts(ar.rollout_id, { limit: 1 });
      await a.querySpans(ar.rollout_id, { limit: 1 });
      await a.querySpans(ar.rollout_id, { attempt_id: "latest", limit: 1 });
      await a.querySpans(ar.rollout_id, { name: "x", limit: 1 });
      await a.querySpans(ar.rollout_id, { trace_id: "0", span_id: "0", filter_logic: "or" });
      await a.queryRollouts({ status_in: ["queuing"], limit: 1 });
      await poke(2);
      await a.getNextSpanSequenceId(ar.rollout_id, ar.attempt.attempt_id);
      await a.getManySpanSequenceIds([[rollouts[1]!.rollout_id, "at-00000001"]]);
      await a.dequeueManyRollouts({ limit: 2, worker_id: "w2" });
      await a.runWatchdog();
      // More rollouts due than one watchdog page holds: the page after the first one is read too.
      await a.enqueueManyRollouts(Array.from({ length: 150 }, (_, i) => ({ input: { i }, config: { timeout_seconds: 0.001 } })));
      await a.dequeueManyRollouts({ limit: 1000 });
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(await a.runWatchdog()).toBe(150);
      await a.statistics();
      await a.close();
      await b.close();
    });

    const db = new Database(path);
    const unindexed: string[] = [];
    let checked = 0;
    // A page of rollouts with one status (the dashboard's filter) must not sort every rollout in it either.
    const byStatus = (sql: string) => /FROM "rollouts" WHERE "status" = \? ORDER BY/.test(sql);
    for (const sql of seen) {
      if (!(/\b(spans|attempts)\b/.test(sql) || byStatus(sql)) || !madeByStore(sql)) continue;
      const plan = queryPlan(db, sql);
      checked++;
      // "SCAN spans" alone is a full-table scan; "SCAN ... USING COVERING INDEX" (a COUNT) reads only an index.
      const bad = plan.filter((p) => /^SCAN (spans|attempts|[ab])$/.test(p) || /TEMP B-TREE/.test(p));
      if (bad.length > 0) unindexed.push(`${sql.slice(0, 160)}\n    ${plan.join("\n    ")}`);
    }
    db.close();
    // The workload reached the span and attempt reads it is meant to check.
    expect(checked).toBeGreaterThanOrEqual(8);
    expect([...seen].some((s) => /FROM "spans" WHERE "rollout_id" = \? ORDER BY/.test(s))).toBe(true);
    expect([...seen].some((s) => /FROM "attempts" WHERE "rollout_id" = \? ORDER BY/.test(s))).toBe(true);
    expect([...seen].some(byStatus)).toBe(true);
    expect([...seen].filter((s) => /WHERE "watchdog_deadline" < \?/.test(s))).toHaveLength(2);
    expect(unindexed).toEqual([]);
  });

  it("totals, statistics and the newest rollouts cost the same on any store: row counters and an index, no count or sort", async () => {
    const path = join(dir, "totals.db");
    const filled = await LibsqlLightningStore.open(`file:${path}`);
    await filled.enqueueManyRollouts(Array.from({ length: 6 }, (_, i) => ({ input: { i } })));
    for (const ar of await filled.dequeueManyRollouts({ limit: 4, worker_id: "w1" }))
      await filled.updateAttempt(ar.rollout_id, ar.attempt.attempt_id, { status: "succeeded" });
    await filled.close();

    // A fresh connection, so that each statement these reads use is prepared (and seen) here.
    const seen = await preparedDuring(async () => {
      const store = await LibsqlLightningStore.open(`file:${path}`);
      await store.statistics();
      // Totals of pages cut short by their limit: a status filter (the dashboard's counts, /metrics) and whole tables.
      expect((await store.queryRollouts({ status_in: ["succeeded"], limit: 1 })).total).toBe(4);
      expect((await store.queryRollouts({ status_in: ["queuing", "succeeded"], limit: 0 })).total).toBe(6);
      expect((await store.queryRollouts({ limit: 0 })).total).toBe(6);
      expect((await store.queryWorkers({ limit: 0 })).total).toBe(1);
      // The dashboard's default list: the newest rollouts first.
      const newest = await store.queryRollouts({ sort_by: "start_time", sort_order: "desc", limit: 2 });
      expect(newest.total).toBe(6);
      await store.close();
    });

    const db = new Database(path);
    const costly: string[] = [];
    for (const sql of seen) {
      if (!/\b(rollouts|attempts|spans|workers|resources)\b/.test(sql) || !madeByStore(sql)) continue;
      const plan = queryPlan(db, sql);
      // A COUNT reads every matching index entry; a bare SCAN reads the table; a TEMP B-TREE sorts what it read.
      if (/COUNT\(/.test(sql) || plan.some((p) => /^SCAN \w+$/.test(p) || /TEMP B-TREE/.test(p)))
        costly.push(`${sql.slice(0, 160)}\n    ${plan.join("\n    ")}`);
      else if (/ORDER BY "start_time" DESC/.test(sql)) expect(plan.join(" ")).toContain("rollouts_start_time_idx");
    }
    db.close();
    expect(costly).toEqual([]);
    expect([...seen].some((s) => /FROM "row_counts"/.test(s))).toBe(true);
    expect([...seen].some((s) => /ORDER BY "start_time" DESC/.test(s))).toBe(true);
  });
});
