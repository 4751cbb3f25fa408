/**
 * Schema migrations: the embedded copy matches drizzle-kit's files, a database as an older version left
 * it upgrades when opened by the current code (its data intact, its unfinished rollouts still watched),
 * and a database from a newer schema is refused. An older database is made by filling one with the
 * current code and undoing the later migrations' schema changes (`downgrade`).
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { LibsqlLightningStore } from "../../src/store/index.ts";
import { openDriver, parseDbUrl } from "../../src/store/libsql/driver.ts";
import { applyMigrations } from "../../src/store/libsql/migrate.ts";
import { migrationsFromFiles } from "../../scripts/migration-files.ts";
import { MIGRATIONS } from "../../src/store/libsql/migrations/index.ts";
import { watchdogDeadline } from "../../src/store/decisions.ts";
import { LightningError, ManualClock, spanFromAttributes } from "../../src/types/index.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const migrationsDir = join(root, "src/store/libsql/migrations");
const dir = mkdtempSync(join(tmpdir(), "libsql-migrations-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** What each migration after the first changed, undone (a new migration adds its line here). */
const UNDO: Record<string, string[]> = {
  "0001_spans_by_sequence": [`DROP INDEX "spans_rollout_sequence_idx"`],
  "0002_watchdog_deadlines": [`DROP INDEX "attempts_watchdog_deadline_idx"`, `ALTER TABLE "attempts" DROP COLUMN "watchdog_deadline"`],
  "0003_row_counts": [
    ...["attempts", "resources", "workers", "rollouts"].map((t) => `DROP TRIGGER "row_counts_${t}_insert"`),
    ...["attempts", "spans", "resources", "workers", "rollouts"].map((t) => `DROP TRIGGER "row_counts_${t}_delete"`),
    `DROP TRIGGER "row_counts_rollouts_status"`,
    `DROP TABLE "row_counts"`,
    `DROP INDEX "rollouts_start_time_idx"`,
  ],
  // 0003's triggers for what the store counts itself since 0004.
  "0004_row_counts_by_store": MIGRATIONS.find((m) => m.tag === "0003_row_counts")!.statements.filter((sql) =>
    /^CREATE TRIGGER `row_counts_(rollouts_insert|rollouts_status|attempts_insert)`/.test(sql),
  ),
};

/** Takes the database at `url` back to the schema of its first `keep` migrations, as that version left it. */
async function downgrade(url: string, keep: number): Promise<void> {
  const driver = await openDriver(parseDbUrl(url), { busyTimeoutMs: 1000 });
  await driver.tx("w", async (c) => {
    for (const m of MIGRATIONS.slice(keep).reverse()) {
      const undo = UNDO[m.tag];
      if (undo === undefined) throw new Error(`no undo for migration ${m.tag}: add it to UNDO`);
      for (const sql of undo) await c.run(sql);
    }
    await c.run(`DELETE FROM "__drizzle_migrations" WHERE created_at > ?`, [MIGRATIONS[keep - 1]!.when]);
  });
  await driver.close();
}

const indexNames = async (url: string): Promise<string[]> => {
  const driver = await openDriver(parseDbUrl(url), { busyTimeoutMs: 1000 });
  const rows = await driver.tx("r", (c) =>
    c.all(`SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_%' ORDER BY name`),
  );
  await driver.close();
  return rows.map((r) => String(r[0]));
};

describe("libSQL schema migrations", () => {
  it("the embedded migrations are exactly drizzle-kit's files (rerun scripts/embed-migrations.ts after generate)", () => {
    const fromFiles = migrationsFromFiles((name) => readFileSync(join(migrationsDir, name), "utf8"));
    expect(MIGRATIONS).toEqual(fromFiles);
    expect(MIGRATIONS.length).toBeGreaterThanOrEqual(2);
  });

  it("every migration after the first can be undone here (the other tests make older databases that way)", async () => {
    expect(MIGRATIONS.slice(1).map((m) => m.tag)).toEqual(Object.keys(UNDO));
    const url = `file:${join(dir, "undo.db")}`;
    await (await LibsqlLightningStore.open(url)).close();
    await downgrade(url, 1);
    const driver = await openDriver(parseDbUrl(url), { busyTimeoutMs: 1000 });
    // Applying them again from the first one's schema works: the undo left exactly that schema.
    expect(await applyMigrations(driver, MIGRATIONS)).toEqual(MIGRATIONS.slice(1).map((m) => m.tag));
    await driver.close();
  });

  it("a database at the first migration's schema, filled, then opened by the current code: upgraded, data intact", async () => {
    const url = `file:${join(dir, "old.db")}`;
    const old = await LibsqlLightningStore.open(url);
    const res = await old.addResources({ llm: { resource_type: "llm", endpoint: "http://x/v1", model: "m" } });
    const queued = await old.enqueueManyRollouts([{ input: { q: 1 }, metadata: { tag: "a" } }, { input: "two" }, { input: null }]);
    const claimed = (await old.dequeueRollout({ worker_id: "w1" }))!;
    const spans = [3, 1, 2].map((k) =>
      spanFromAttributes({
        rollout_id: claimed.rollout_id,
        attempt_id: claimed.attempt.attempt_id,
        sequence_id: k,
        name: `s${k}`,
        attributes: { k },
      }),
    );
    await old.addManySpans(spans);
    await old.updateAttempt(claimed.rollout_id, "latest", { status: "succeeded" });
    await old.updateWorker("w1", { gpu: 0.5 });
    const before = {
      rollouts: await old.queryRollouts(),
      spans: await old.querySpans(claimed.rollout_id),
      resources: await old.getLatestResources(),
      workers: await old.queryWorkers(),
      stats: { ...(await old.statistics()), uptime: 0, name: "" },
    };
    await old.close();
    await downgrade(url, 1);
    expect(await indexNames(url)).not.toContain("spans_rollout_sequence_idx");

    const current = await LibsqlLightningStore.open(url);
    expect(await indexNames(url)).toContain("spans_rollout_sequence_idx");
    expect(await current.queryRollouts()).toEqual(before.rollouts);
    expect(await current.querySpans(claimed.rollout_id)).toEqual(before.spans);
    expect((await current.querySpans(claimed.rollout_id)).items.map((s) => s.name)).toEqual(["s1", "s2", "s3"]);
    expect(await current.getLatestResources()).toEqual(before.resources);
    expect(before.resources!.resources_id).toBe(res.resources_id);
    expect(await current.queryWorkers()).toEqual(before.workers);
    expect({ ...(await current.statistics()), uptime: 0, name: "" }).toEqual(before.stats);
    // It goes on working where the old code stopped: the queue and the sequence counters survived.
    const next = (await current.dequeueRollout())!;
    expect(next.rollout_id).toBe(queued[1]!.rollout_id);
    expect(await current.getNextSpanSequenceId(claimed.rollout_id, claimed.attempt.attempt_id)).toBe(4);
    await current.close();

    // Opening again applies nothing new and changes nothing.
    const again = await LibsqlLightningStore.open(url);
    expect((await again.statistics()).total_rollouts).toBe(3);
    await again.close();
  });

  it("a database from before the watchdog deadlines: its unfinished rollouts get theirs, to the bit, and still time out", async () => {
    const url = `file:${join(dir, "deadlines.db")}`;
    const T0 = 1_700_000_000.123;
    const clock = new ManualClock(T0);
    const store = await LibsqlLightningStore.open(url, { clock });
    const timeout = await store.startRollout("t", { config: { timeout_seconds: 7.3 }, worker_id: "w1" });
    const silent = await store.startRollout("u", { config: { unresponsive_seconds: 0.1 } });
    clock.advance(0.05);
    await store.addSpan(
      spanFromAttributes({ rollout_id: silent.rollout_id, attempt_id: silent.attempt.attempt_id, sequence_id: 1, name: "hb" }),
    );
    const both = await store.startRollout("b", { config: { timeout_seconds: 2.2, unresponsive_seconds: 9.9 } });
    // Running by hand with an unresponsive attempt: only its timeout is left to watch.
    const flagged = await store.startRollout("x", { config: { timeout_seconds: 3.3, unresponsive_seconds: 0.5 } });
    await store.updateAttempt(flagged.rollout_id, "latest", { status: "unresponsive" });
    await store.updateRollout(flagged.rollout_id, { status: "running" });
    const retried = await store.startRollout("r", { config: { timeout_seconds: 4.4 } });
    clock.advance(1.01);
    await store.startAttempt(retried.rollout_id);
    const done = await store.startRollout("d", { config: { timeout_seconds: 1 } });
    await store.updateAttempt(done.rollout_id, "latest", { status: "succeeded" });
    const queued = await store.enqueueRollout("q", { config: { timeout_seconds: 1 } });
    const free = await store.startRollout("f");
    const watched = [timeout, silent, both, flagged, retried].map((r) => r.rollout_id);
    const all = [...watched, done.rollout_id, queued.rollout_id, free.rollout_id];
    // What the current code keeps: each rollout's deadline on its latest attempt, null elsewhere.
    const expected: [string, number | null][] = [];
    for (const id of all) {
      const r = (await store.getRolloutById(id))!;
      const latest = await store.getLatestAttempt(id);
      for (const a of (await store.queryAttempts(id)).items) {
        expected.push([a.attempt_id, a.attempt_id === latest?.attempt_id ? watchdogDeadline(r, a) : null]);
      }
    }
    await store.close();
    const columns = async () => {
      const driver = await openDriver(parseDbUrl(url), { busyTimeoutMs: 1000 });
      const rows = await driver.tx("r", (c) => c.all(`SELECT "attempt_id", "watchdog_deadline" FROM "attempts" ORDER BY rowid`));
      await driver.close();
      return rows.map((r) => [r[0], r[1]]);
    };
    expect(await columns()).toEqual(expected);
    expect(expected.filter(([, d]) => d !== null)).toHaveLength(watched.length);

    await downgrade(url, 2);
    const upgraded = await LibsqlLightningStore.open(url, { clock, scanDebounceSeconds: 1e9 });
    // The migration computed in SQL what the code computes in JavaScript, to the last bit.
    expect(await columns()).toEqual(expected);
    clock.set(T0 + 10);
    expect(await upgraded.runWatchdog()).toBe(watched.length);
    const statuses = async (ids: string[]) =>
      Promise.all(ids.map(async (id) => [(await upgraded.getRolloutById(id))!.status, (await upgraded.getLatestAttempt(id))!.status]));
    expect(await statuses(watched)).toEqual([
      ["failed", "timeout"],
      ["failed", "unresponsive"],
      ["failed", "timeout"],
      ["failed", "timeout"],
      ["failed", "timeout"],
    ]);
    expect(await statuses([done.rollout_id, free.rollout_id])).toEqual([
      ["succeeded", "succeeded"],
      ["preparing", "preparing"],
    ]);
    expect((await upgraded.getRolloutById(queued.rollout_id))!.status).toBe("queuing");
    await upgraded.close();
    expect((await columns()).filter(([, d]) => d !== null)).toEqual([]);
  });

  it("a database from before the row counters: its totals are counted from its rows when opened, then kept", async () => {
    const url = `file:${join(dir, "counts.db")}`;
    const old = await LibsqlLightningStore.open(url);
    await old.enqueueManyRollouts(Array.from({ length: 7 }, (_, i) => ({ input: i })));
    const claimed = await old.dequeueManyRollouts({ limit: 4, worker_id: "w1" });
    await old.updateAttempt(claimed[0]!.rollout_id, "latest", { status: "succeeded" });
    await old.updateAttempt(claimed[1]!.rollout_id, "latest", { status: "failed" });
    await old.addManySpans(
      [1, 2, 3].map((k) =>
        spanFromAttributes({ rollout_id: claimed[2]!.rollout_id, attempt_id: claimed[2]!.attempt.attempt_id, sequence_id: k, name: "s" }),
      ),
    );
    await old.close();
    await downgrade(url, 3);

    const statuses = ["queuing", "preparing", "running", "succeeded", "failed"] as const;
    /** Every total the store reports, and the same counted from the rows. */
    const totals = async (store: LibsqlLightningStore) => {
      const s = await store.statistics();
      const byStatus = statuses.map(async (st) => [st, (await store.queryRollouts({ status_in: [st], limit: 0 })).total]);
      return {
        rollouts: s.total_rollouts,
        attempts: s.total_attempts,
        spans: s.total_spans,
        ...Object.fromEntries(await Promise.all(byStatus)),
      };
    };
    const counted = async () => {
      const driver = await openDriver(parseDbUrl(url), { busyTimeoutMs: 1000 });
      const row = await driver.tx("r", (c) =>
        c.all(
          `SELECT (SELECT COUNT(*) FROM "rollouts"), (SELECT COUNT(*) FROM "attempts"), (SELECT COUNT(*) FROM "spans"), ` +
            statuses.map((st) => `(SELECT COUNT(*) FROM "rollouts" WHERE "status" = '${st}')`).join(", "),
        ),
      );
      await driver.close();
      const [rollouts, attempts, spans, queuing, preparing, running, succeeded, failed] = Array.from(row[0]!, Number);
      return { rollouts, attempts, spans, queuing, preparing, running, succeeded, failed };
    };
    const upgraded = await LibsqlLightningStore.open(url);
    expect(await totals(upgraded)).toEqual(await counted());
    expect(await totals(upgraded)).toEqual({
      rollouts: 7,
      attempts: 4,
      spans: 3,
      queuing: 3,
      preparing: 1,
      running: 1,
      succeeded: 1,
      failed: 1,
    });
    await upgraded.enqueueRollout("more");
    await upgraded.updateAttempt(claimed[3]!.rollout_id, "latest", { status: "succeeded" });
    expect(await totals(upgraded)).toEqual(await counted());
    await upgraded.close();
  });

  it("a database migrated by a newer version is refused, not damaged", async () => {
    const url = `file:${join(dir, "newer.db")}`;
    await (await LibsqlLightningStore.open(url)).close();
    const driver = await openDriver(parseDbUrl(url), { busyTimeoutMs: 1000 });
    await driver.tx("w", (c) =>
      c.run(`INSERT INTO "__drizzle_migrations" (hash, created_at) VALUES ('future', ?)`, [Date.UTC(2100, 0, 1)]),
    );
    await driver.close();
    await expect(LibsqlLightningStore.open(url)).rejects.toBeInstanceOf(LightningError);
  });
});
