/**
 * Schema migrations: the embedded copy matches drizzle-kit's files, a database created by the first
 * migration (and filled by the store code of that time) upgrades when opened by the current code, and a
 * database from a newer schema is refused.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { LightningStoreCore } from "../../src/store/core.ts";
import { LibsqlLightningStore } from "../../src/store/index.ts";
import { openDriver, parseDbUrl } from "../../src/store/libsql/driver.ts";
import { applyMigrations } from "../../src/store/libsql/migrate.ts";
import { migrationsFromFiles } from "../../scripts/migration-files.ts";
import { MIGRATIONS } from "../../src/store/libsql/migrations/index.ts";
import { LibsqlStorage } from "../../src/store/libsql/storage.ts";
import { LightningError, spanFromAttributes } from "../../src/types/index.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const migrationsDir = join(root, "src/store/libsql/migrations");
const dir = mkdtempSync(join(tmpdir(), "libsql-migrations-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const indexNames = async (url: string): Promise<string[]> => {
  const driver = await openDriver(parseDbUrl(url), { busyTimeoutMs: 1000 });
  const rows = await driver.tx("r", (c) => c.all(`SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_%' ORDER BY name`));
  await driver.close();
  return rows.map((r) => String(r[0]));
};

describe("libSQL schema migrations", () => {
  it("the embedded migrations are exactly drizzle-kit's files (rerun scripts/embed-migrations.ts after generate)", () => {
    const fromFiles = migrationsFromFiles((name) => readFileSync(join(migrationsDir, name), "utf8"));
    expect(MIGRATIONS).toEqual(fromFiles);
    expect(MIGRATIONS.length).toBeGreaterThanOrEqual(2);
  });

  it("a database made by the first migration and filled, then opened by the current code: upgraded, data intact", async () => {
    const url = `file:${join(dir, "old.db")}`;
    // The store as it was at migration 0000: the same core over a database with only that schema.
    const driver = await openDriver(parseDbUrl(url), { busyTimeoutMs: 1000 });
    expect(await applyMigrations(driver, MIGRATIONS.slice(0, 1))).toEqual([MIGRATIONS[0]!.tag]);
    const old = new LightningStoreCore(new LibsqlStorage(driver), "old");
    const res = await old.addResources({ llm: { resource_type: "llm", endpoint: "http://x/v1", model: "m" } });
    const queued = await old.enqueueManyRollouts([{ input: { q: 1 }, metadata: { tag: "a" } }, { input: "two" }, { input: null }]);
    const claimed = (await old.dequeueRollout({ worker_id: "w1" }))!;
    const spans = [3, 1, 2].map((k) =>
      spanFromAttributes({ rollout_id: claimed.rollout_id, attempt_id: claimed.attempt.attempt_id, sequence_id: k, name: `s${k}`, attributes: { k } }),
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

  it("a database migrated by a newer version is refused, not damaged", async () => {
    const url = `file:${join(dir, "newer.db")}`;
    await (await LibsqlLightningStore.open(url)).close();
    const driver = await openDriver(parseDbUrl(url), { busyTimeoutMs: 1000 });
    await driver.tx("w", (c) => c.run(`INSERT INTO "__drizzle_migrations" (hash, created_at) VALUES ('future', ?)`, [Date.UTC(2100, 0, 1)]));
    await driver.close();
    await expect(LibsqlLightningStore.open(url)).rejects.toBeInstanceOf(LightningError);
  });
});
