/**
 * Applies the embedded drizzle-kit migrations when a store opens. Bookkeeping follows drizzle's own
 * migrators (table `__drizzle_migrations` with the sha256 of each file and its journal timestamp as
 * `created_at`; a migration runs when its timestamp is newer than the last one recorded), so a database
 * migrated by drizzle's tools and one migrated here agree. All pending migrations run in ONE write
 * transaction: two processes opening a fresh file at once cannot both apply them, and a failing
 * migration leaves the database as it was.
 */
import { LightningError } from "../../types/index.ts";
import type { SqlDriver } from "./driver.ts";

export interface EmbeddedMigration {
  tag: string;
  /** drizzle-kit's journal timestamp (ms). */
  when: number;
  /** sha256 of the SQL file. */
  hash: string;
  statements: string[];
}

const TABLE = "__drizzle_migrations";

/** Applies every migration newer than the last recorded one; returns the tags applied. */
export async function applyMigrations(driver: SqlDriver, migrations: readonly EmbeddedMigration[]): Promise<string[]> {
  return driver.tx("w", async (c) => {
    await c.run(`CREATE TABLE IF NOT EXISTS "${TABLE}" (id INTEGER PRIMARY KEY AUTOINCREMENT, hash text NOT NULL, created_at numeric)`);
    const last = await c.all(`SELECT created_at FROM "${TABLE}" ORDER BY created_at DESC LIMIT 1`);
    const lastWhen = last.length > 0 ? Number(last[0]![0]) : Number.NEGATIVE_INFINITY;
    const newest = migrations.length > 0 ? migrations[migrations.length - 1]!.when : Number.NEGATIVE_INFINITY;
    if (lastWhen > newest) {
      throw new LightningError(
        `The database was migrated by a newer version of Lightning TS (schema ${lastWhen}, this version knows up to ${newest}); upgrade the library`,
      );
    }
    const applied: string[] = [];
    for (const m of migrations) {
      if (m.when <= lastWhen) continue;
      for (const sql of m.statements) await c.run(sql);
      await c.run(`INSERT INTO "${TABLE}" (hash, created_at) VALUES (?, ?)`, [m.hash, m.when]);
      applied.push(m.tag);
    }
    return applied;
  });
}
