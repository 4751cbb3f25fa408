/**
 * The libSQL storage keeps rows between transactions and holds writes back until the commit
 * (src/store/libsql/row-cache.ts). These tests check what that must never change: another connection's
 * writes are always seen, rows handed out cannot corrupt the cache, a failing call leaves nothing
 * behind, in the cache or in the file, and the cache stays within its byte budget however large the rows
 * (what it drops is read back from SQL, intact).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterAll, describe, expect, it } from "vitest";
import { DEFAULT_ROW_CACHE_MIB, LibsqlLightningStore } from "../../src/store/index.ts";
import { openDriver, parseDbUrl } from "../../src/store/libsql/driver.ts";
import { applyMigrations } from "../../src/store/libsql/migrate.ts";
import { MIGRATIONS } from "../../src/store/libsql/migrations/index.ts";
import { LibsqlStorage } from "../../src/store/libsql/storage.ts";
import { ValidationError, spanFromAttributes } from "../../src/types/index.ts";

const dir = mkdtempSync(join(tmpdir(), "libsql-cache-"));
let n = 0;
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const url = () => `file:${join(dir, `c${n++}.db`)}`;

describe("LibsqlLightningStore row cache", () => {
  it("sees every write another connection commits, for each cached kind of row", async () => {
    const at = url();
    const a = await LibsqlLightningStore.open(at, { scanDebounceSeconds: 0 });
    const b = await LibsqlLightningStore.open(at, { scanDebounceSeconds: 0 });
    const res = await a.addResources({ llm: { resource_type: "llm", endpoint: "http://a/v1", model: "m" } });
    await a.enqueueRollout({ q: 1 });
    const claimed = (await a.dequeueRollout({ worker_id: "w1" }))!;
    const span = (k: number) =>
      spanFromAttributes({ rollout_id: claimed.rollout_id, attempt_id: claimed.attempt.attempt_id, sequence_id: k, name: `s${k}` });
    await a.addSpan(span(1));
    // Everything a's cache holds now is changed through b.
    await b.updateRollout(claimed.rollout_id, { metadata: { by: "b" } });
    await b.updateAttempt(claimed.rollout_id, claimed.attempt.attempt_id, { metadata: { by: "b" } });
    await b.updateWorker("w1", { by: "b" });
    const res2 = await b.addResources({ llm: { resource_type: "llm", endpoint: "http://b/v1", model: "m" } });
    await b.updateResources(res.resources_id, { llm: { resource_type: "llm", endpoint: "http://b2/v1", model: "m" } });
    expect(await b.getNextSpanSequenceId(claimed.rollout_id, claimed.attempt.attempt_id)).toBe(2);
    const again = await b.startAttempt(claimed.rollout_id);

    expect((await a.getRolloutById(claimed.rollout_id))!.metadata).toEqual({ by: "b" });
    expect((await a.getLatestAttempt(claimed.rollout_id))!.attempt_id).toBe(again.attempt.attempt_id);
    const first = (await a.queryAttempts(claimed.rollout_id)).items[0]!;
    expect(first.metadata).toEqual({ by: "b" });
    expect((await a.getWorkerById("w1"))!.heartbeat_stats).toEqual({ by: "b" });
    // The snapshot written last is the latest: the update of the first one, after b added its own.
    expect((await a.getLatestResources())!.resources_id).toBe(res.resources_id);
    expect((await a.getResourcesById(res2.resources_id))!.resources.llm).toMatchObject({ endpoint: "http://b/v1" });
    expect((await a.getResourcesById(res.resources_id))!.resources.llm).toMatchObject({ endpoint: "http://b2/v1" });
    // a's next sequence id continues from b's.
    expect(await a.getNextSpanSequenceId(claimed.rollout_id, claimed.attempt.attempt_id)).toBe(3);
    // And b sees a's held-back writes once a's call has returned.
    await a.updateAttempt(claimed.rollout_id, "latest", { status: "succeeded" });
    expect((await b.getRolloutById(claimed.rollout_id))!.status).toBe("succeeded");
    await a.close();
    await b.close();
  });

  it("rows handed out are frozen: a caller cannot change what the store returns next", async () => {
    const store = await LibsqlLightningStore.open(url());
    const r = await store.enqueueRollout({ q: [1, 2] }, { metadata: { tag: "x" } });
    const read = (await store.getRolloutById(r.rollout_id))!;
    expect(() => {
      (read as { status: string }).status = "failed";
    }).toThrow(TypeError);
    expect(() => (read.input as { q: number[] }).q.push(3)).toThrow(TypeError);
    expect(() => {
      (r.metadata as Record<string, unknown>).tag = "y";
    }).toThrow(TypeError);
    const again = (await store.getRolloutById(r.rollout_id))!;
    expect(again.status).toBe("queuing");
    expect(again.input).toEqual({ q: [1, 2] });
    expect(again.metadata).toEqual({ tag: "x" });
    await store.close();
  });

  it("a call that fails after held-back writes leaves neither the cache nor the file changed", async () => {
    const at = url();
    const store = await LibsqlLightningStore.open(at);
    const [keep] = await store.enqueueManyRollouts([{ input: "keep" }]);
    const results = await Promise.allSettled([
      store.updateRollout(keep!.rollout_id, { metadata: { v: 1 } }),
      // Held back: 3 rollouts, then the 4th cannot be stored (BigInt is not JSON).
      store.enqueueManyRollouts([{ input: 1 }, { input: 2 }, { input: 3 }, { input: { big: 10n } }]),
      store.updateRollout(keep!.rollout_id, { mode: "train" }),
    ]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    const check = async (s: LibsqlLightningStore) => {
      const all = await s.queryRollouts();
      expect(all.items.map((r) => r.input)).toEqual(["keep"]);
      expect(all.items[0]).toMatchObject({ metadata: { v: 1 }, mode: "train" });
      expect((await s.dequeueRollout())!.rollout_id).toBe(keep!.rollout_id);
      expect(await s.dequeueRollout()).toBeNull();
    };
    // Through the cache, then through a fresh connection (the file).
    const other = await LibsqlLightningStore.open(at);
    await check(store);
    await store.close();
    const rows = await other.queryRollouts();
    expect(rows.items.map((r) => [r.input, r.status])).toEqual([["keep", "preparing"]]);
    await other.close();
  });

  it("a call whose query wrote out its neighbours' held-back rows, then failed, still commits those rows", async () => {
    const at = url();
    const driver = await openDriver(parseDbUrl(at), { busyTimeoutMs: 1000 });
    await applyMigrations(driver, MIGRATIONS);
    const storage = new LibsqlStorage(driver);
    // Three calls in one group commit: a held-back write, a query (which writes it out inside the
    // second call's savepoint) followed by a failure, and a read.
    const results = await Promise.allSettled([
      storage.tx("w", (t) => t.upsertWorker("w1", { status: "busy" })),
      storage.tx("w", async (t) => {
        await t.upsertWorker("w2", { status: "idle" });
        const seen = await t.query("workers", { limit: -1, offset: 0 });
        expect(seen.items.map((w) => w.worker_id)).toEqual(["w1", "w2"]);
        throw new Error("fails after its query");
      }),
      storage.tx("w", (t) => t.upsertWorker("w3", { status: "idle" })),
    ]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((results[1] as PromiseRejectedResult).reason).toMatchObject({ message: "fails after its query" });
    await storage.close();
    const store = await LibsqlLightningStore.open(at);
    expect((await store.queryWorkers()).items.map((w) => [w.worker_id, w.status])).toEqual([
      ["w1", "busy"],
      ["w3", "idle"],
    ]);
    await store.close();
  });

  it("queue pops and pushes held back in a group stay FIFO, and a failed pop gives its ids back", async () => {
    const at = url();
    const driver = await openDriver(parseDbUrl(at), { busyTimeoutMs: 1000 });
    await applyMigrations(driver, MIGRATIONS);
    const storage = new LibsqlStorage(driver);
    await storage.tx("w", (t) => t.pushQueue(["a", "b", "c"]));
    const results = await Promise.allSettled([
      storage.tx("w", (t) => t.popQueue(1)),
      storage.tx("w", async (t) => {
        expect(await t.popQueue(1)).toEqual(["b"]);
        throw new Error("fails after its pop");
      }),
      storage.tx("w", async (t) => {
        await t.pushQueue(["d"]);
        expect(await t.queueHas("d")).toBe(true);
        expect(await t.queueHas("a")).toBe(false);
        return t.popQueue(10);
      }),
      storage.tx("w", (t) => t.pushQueue(["e"])),
      storage.tx("r", (t) => t.query("rollouts", { limit: -1, offset: 0 })),
      storage.tx("w", (t) => t.popQueue(10)),
    ]);
    expect(results.map((r) => (r.status === "fulfilled" ? r.value : "failed"))).toEqual([
      ["a"],
      "failed",
      ["b", "c", "d"],
      undefined,
      { items: [], limit: -1, offset: 0, total: 0 },
      ["e"],
    ]);
    await storage.tx("w", (t) => t.pushQueue(["f"]));
    await storage.close();
    // What the file holds: only the last push.
    const again = await openDriver(parseDbUrl(at), { busyTimeoutMs: 1000 });
    expect((await again.tx("r", (c) => c.all(`SELECT "rollout_id" FROM "queue" ORDER BY "id"`))).map((r) => r[0])).toEqual(["f"]);
    await again.close();
  });

  it("pushes and pops of every size (several statements, past the parameter limit) keep the queue FIFO in the file", async () => {
    const at = url();
    const driver = await openDriver(parseDbUrl(at), { busyTimeoutMs: 1000 });
    await applyMigrations(driver, MIGRATIONS);
    const storage = new LibsqlStorage(driver);
    const ids = Array.from({ length: 8000 + 1024 + 37 + 3 }, (_, i) => `r${i}`);
    await storage.tx("w", (t) => t.pushQueue(ids));
    const taken: string[] = [];
    for (const n of [1, 33, 64, 1000, 7000]) taken.push(...(await storage.tx("w", (t) => t.popQueue(n))));
    expect(taken).toEqual(ids.slice(0, taken.length));
    await storage.close();
    // The file holds exactly the rest, in order: the pops were deleted, the pushes kept their order.
    const again = await openDriver(parseDbUrl(at), { busyTimeoutMs: 1000 });
    const rest = (await again.tx("r", (c) => c.all(`SELECT "rollout_id" FROM "queue" ORDER BY "id"`))).map((r) => r[0]);
    expect(rest).toEqual(ids.slice(taken.length));
    await again.close();
  });

  it("a new rollout whose id already exists fails instead of overwriting the stored one", async () => {
    const at = url();
    const open = async () => {
      const driver = await openDriver(parseDbUrl(at), { busyTimeoutMs: 1000 });
      await applyMigrations(driver, MIGRATIONS);
      return new LibsqlStorage(driver);
    };
    const row = (input: string) =>
      ({
        rollout_id: "ro-000000000abc",
        input,
        start_time: 1,
        end_time: null,
        mode: null,
        resources_id: null,
        status: "queuing",
        config: {},
        metadata: null,
      }) as const;
    const first = await open();
    await first.tx("w", (t) => t.insertRollouts([{ ...row("first"), config: { max_attempts: 1 } } as never]));
    // Known to this storage's cache: refused at once.
    await expect(first.tx("w", (t) => t.insertRollouts([row("again") as never]))).rejects.toThrow(/already exists/);
    // Unknown to another connection's cache: refused by SQL when its held-back rows are written.
    const second = await open();
    await expect(second.tx("w", (t) => t.insertRollouts([row("again") as never]))).rejects.toThrow(/UNIQUE/);
    for (const s of [first, second]) expect((await s.tx("r", (t) => t.getRollout("ro-000000000abc")))!.input).toBe("first");
    await first.close();
    await second.close();
  });

  it("many large rows: the heap the cache keeps stays within its budget, and every row reads back intact from SQL", async () => {
    // A full collection before each heap reading (Node: the flag, then the function from a fresh context).
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    const heap = () => {
      gc();
      gc();
      return process.memoryUsage().heapUsed;
    };
    const MiB = 2 ** 20;
    const budget = 8;
    const at = url();
    const store = await LibsqlLightningStore.open(at, { rowCacheMiB: budget });
    // Read without a transaction (a transaction's start would itself drop an overfull cache).
    const atRest = () => store.rowCache;
    // Each input ~1 MiB of JSON text in an object (parsed, the cache keeps the object and its JSON text).
    const inputOf = (i: number) => ({ i, text: `${i}:`.padEnd(MiB, String.fromCharCode(97 + (i % 26))) });
    const before = heap();
    const ids: string[] = [];
    for (let i = 0; i < 40; i++) {
      ids.push((await store.enqueueRollout(inputOf(i))).rollout_id);
      // After each commit, not only at the next transaction's start.
      expect(atRest().bytes).toBeLessThanOrEqual(budget * MiB);
    }
    for (let i = 0; i < 40; i++) {
      // Each dequeue writes the rollout again (status), with its input.
      expect((await store.dequeueRollout({ worker_id: "w" }))!.rollout_id).toBe(ids[i]);
      expect(atRest().bytes).toBeLessThanOrEqual(budget * MiB);
    }
    // 40 rollouts of ~2 MiB each (object + JSON text) would be ~80 MiB; the cache keeps at most its budget.
    expect((heap() - before) / MiB).toBeLessThan(budget * 2);
    expect(atRest().budgetBytes).toBe(budget * MiB);

    // What was dropped is read back from SQL: inputs, statuses, attempts, and it can still be written.
    for (let i = 0; i < 40; i++) {
      const r = (await store.getRolloutById(ids[i]!))!;
      expect(r.input).toEqual(inputOf(i));
      expect(r.status).toBe("preparing");
      await store.updateAttempt(ids[i]!, "latest", { status: "succeeded" });
    }
    await store.close();
    const other = await LibsqlLightningStore.open(at);
    const all = await other.queryRollouts({ limit: -1 });
    expect(all.items.map((r) => [r.status, (r.input as { i: number }).i, (r.input as { text: string }).text.length])).toEqual(
      ids.map((_, i) => ["succeeded", i, MiB]),
    );
    await other.close();
  });

  it("a budget of 0 keeps rows only within a transaction; the default is 64 MiB; a bad budget is refused", async () => {
    const store = await LibsqlLightningStore.open(url(), { rowCacheMiB: 0 });
    const r = await store.enqueueRollout({ q: 1 });
    expect(store.rowCache).toEqual({ bytes: 0, budgetBytes: 0 });
    expect((await store.dequeueRollout())!.rollout_id).toBe(r.rollout_id);
    await store.updateAttempt(r.rollout_id, "latest", { status: "succeeded" });
    expect((await store.getRolloutById(r.rollout_id))!.status).toBe("succeeded");
    expect(store.rowCache).toEqual({ bytes: 0, budgetBytes: 0 });
    await store.close();
    const dflt = await LibsqlLightningStore.open(url());
    expect(dflt.rowCache.budgetBytes).toBe(DEFAULT_ROW_CACHE_MIB * 2 ** 20);
    await dflt.close();
    expect(DEFAULT_ROW_CACHE_MIB).toBe(64);
    for (const bad of [-1, Number.NaN, Number.POSITIVE_INFINITY, "8" as unknown as number]) {
      await expect(LibsqlLightningStore.open(url(), { rowCacheMiB: bad })).rejects.toBeInstanceOf(ValidationError);
    }
  });
});
