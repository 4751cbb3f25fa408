/**
 * Reads drizzle-kit's output (journal + SQL files) into embeddable migrations. Shared by the embed
 * script and the test that checks the embedded copy is current. Node-only callers pass a file reader.
 */
import { createHash } from "node:crypto";
import type { EmbeddedMigration } from "../src/store/libsql/migrate.ts";

interface Journal {
  entries: { idx: number; when: number; tag: string; breakpoints: boolean }[];
}

export function migrationsFromFiles(read: (name: string) => string): EmbeddedMigration[] {
  const journal = JSON.parse(read("meta/_journal.json")) as Journal;
  return journal.entries.map((e) => {
    const sql = read(`${e.tag}.sql`);
    return {
      tag: e.tag,
      when: e.when,
      // drizzle's migrators record the sha256 of the file text; keep the same value.
      hash: createHash("sha256").update(sql).digest("hex"),
      statements: sql
        .split("--> statement-breakpoint")
        .map((s) => s.trim())
        .filter((s) => s.length > 0),
    };
  });
}
