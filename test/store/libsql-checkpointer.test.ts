/**
 * Background WAL checkpoints (src/store/libsql/checkpointer.ts): a worker thread folds the WAL into the
 * database file while the store keeps writing; without it nothing is folded in before SQLite's own
 * threshold; a worker that cannot open the file is reported and the store falls back; a process that exits
 * with its store open neither hangs nor aborts (on Node, Deno and Bun).
 */
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LibsqlLightningStore } from "../../src/store/index.ts";
import { BackgroundCheckpointer } from "../../src/store/libsql/checkpointer.ts";
import { spanFromAttributes } from "../../src/types/index.ts";
import { runOnRuntime, type Runtime } from "../runtimes.ts";

const dir = mkdtempSync(join(tmpdir(), "libsql-checkpointer-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const pragma = (s: LibsqlLightningStore, sql: string) =>
  (s as unknown as { storage: { driver: { pragma(q: string): Promise<ArrayLike<unknown>[]> } } }).storage.driver.pragma(sql);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const exitChild = "test/store/libsql-exit-child.ts";

/** Writes ~`n` spans' worth of pages (a few hundred WAL pages: below both auto-checkpoint thresholds). */
async function write(store: LibsqlLightningStore, n: number): Promise<void> {
  const ar = await store.startRollout({ q: "checkpoint" });
  const spans = Array.from({ length: n }, (_, i) =>
    spanFromAttributes({
      rollout_id: ar.rollout_id,
      attempt_id: ar.attempt.attempt_id,
      sequence_id: i + 1,
      name: `s${i}`,
      attributes: { text: "x".repeat(200) },
    }),
  );
  for (let i = 0; i < n; i += 100) await store.addManySpans(spans.slice(i, i + 100));
}

/** Waits until `path` is larger than `size` bytes; returns its size then (or after `ms`). */
async function growth(path: string, size: number, ms: number): Promise<number> {
  const deadline = Date.now() + ms;
  for (;;) {
    const now = statSync(path).size;
    if (now > size || Date.now() >= deadline) return now;
    await sleep(20);
  }
}

describe("background WAL checkpoints", () => {
  it("a worker thread folds committed pages into the database file while the store stays open", async () => {
    const path = join(dir, "bg.db");
    const store = await LibsqlLightningStore.open(`file:${path}`);
    expect(store.checkpointsInBackground).toBe(true);
    expect(Number((await pragma(store, "PRAGMA wal_autocheckpoint"))[0]![0])).toBe(10_000);
    const before = statSync(path).size;
    await write(store, 1_000);
    expect(await growth(path, before, 5_000)).toBeGreaterThan(before);
    expect(await store.integrityCheck()).toEqual(["ok"]);
    await store.close();
    expect(store.checkpointsInBackground).toBe(false);
    const again = await LibsqlLightningStore.open(`file:${path}`);
    expect((await again.statistics()).total_spans).toBe(1_000);
    await again.close();
  });

  it("without it (backgroundCheckpoints: false) nothing is folded in below SQLite's own threshold", async () => {
    const path = join(dir, "fg.db");
    const store = await LibsqlLightningStore.open(`file:${path}`, { backgroundCheckpoints: false });
    expect(store.checkpointsInBackground).toBe(false);
    expect(Number((await pragma(store, "PRAGMA wal_autocheckpoint"))[0]![0])).toBe(1_000);
    const before = statSync(path).size;
    await write(store, 1_000);
    expect(await growth(path, before, 500)).toBe(before);
    await store.close();
    // close() folds the WAL in.
    expect(statSync(path).size).toBeGreaterThan(before);
  });

  it("a worker that cannot open the file is reported, not swallowed, and start() gives null", async () => {
    const errors: Error[] = [];
    const c = await BackgroundCheckpointer.start(join(dir, "no-such-dir", "x.db"), { onError: (e) => errors.push(e) });
    expect(c).toBeNull();
    expect(errors).toHaveLength(1);
    expect(errors[0]!.message).toMatch(/background WAL checkpoint failed/);
  });

  it("a process that exits with its store open (naturally or through process.exit) neither hangs nor aborts", async () => {
    // Exiting while the worker is inside the libsql binding used to abort the process (a neon panic,
    // exit 134) in roughly one child in ten under load: many children at once make that load.
    const runs: Runtime[] = [];
    for (let i = 0; i < 12; i++) runs.push("node");
    for (let i = 0; i < 3; i++) runs.push("deno", "bun");
    const results = await Promise.all(
      runs.map((runtime, i) => {
        const how = i % 2 === 0 ? "natural" : "exit";
        const args = [join(dir, `exit-${i}.db`), how, "300"];
        return runOnRuntime(runtime, exitChild, { args, timeout: 90_000 }).then((r) => ({ how, ...r }));
      }),
    );
    for (const r of results) {
      expect({ ...r, stdout: /^wrote \d+$/.test(r.stdout.trim()) }).toEqual({
        runtime: r.runtime,
        how: r.how,
        code: 0,
        signal: null,
        stdout: true,
        stderr: r.stderr,
      });
      expect(r.stderr).not.toMatch(/panicked/);
    }
  }, 120_000);
});
