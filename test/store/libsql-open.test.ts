/** Opening stores by URL: `openStore`, URL forms, durability settings, persistence across reopen. */
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { DEFAULT_CACHE_SIZE_MIB, InMemoryLightningStore, LibsqlLightningStore, openStore, parseDbUrl } from "../../src/store/index.ts";
import { ValidationError, spanFromAttributes } from "../../src/types/index.ts";

const dir = mkdtempSync(join(tmpdir(), "libsql-open-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const pragma = (s: LibsqlLightningStore, sql: string) =>
  (s as unknown as { storage: { driver: { pragma(q: string): Promise<ArrayLike<unknown>[]> } } }).storage.driver.pragma(sql);

describe("opening a store by URL", () => {
  it("parses the supported URL forms and rejects others with a ValidationError", () => {
    expect(parseDbUrl(":memory:")).toMatchObject({ kind: "memory" });
    expect(parseDbUrl("file:data/store.db")).toMatchObject({ kind: "file", path: "data/store.db" });
    expect(parseDbUrl("file:///abs/store.db")).toMatchObject({ kind: "file", path: "/abs/store.db" });
    expect(parseDbUrl("file:/abs/my%20store.db")).toMatchObject({ kind: "file", path: "/abs/my store.db" });
    for (const u of ["libsql://db.example.com", "https://db.example.com", "http://127.0.0.1:8080", "wss://db.example.com"]) {
      expect(parseDbUrl(u)).toMatchObject({ kind: "remote", url: u });
    }
    for (const bad of ["store.db", "postgres://x", "file:", ""]) expect(() => parseDbUrl(bad)).toThrow(ValidationError);
  });

  it('openStore("memory") is the in-memory store; ":memory:" and file: URLs are libSQL stores', async () => {
    const mem = await openStore("memory");
    expect(mem).toBeInstanceOf(InMemoryLightningStore);
    await mem.close();
    const lm = await openStore(":memory:");
    expect(lm).toBeInstanceOf(LibsqlLightningStore);
    expect((await lm.statistics()).name).toBe("LibsqlLightningStore");
    await lm.close();
  });

  it("a file store keeps its data across close and reopen, in WAL mode with synchronous=NORMAL by default", async () => {
    const path = join(dir, "persist.db");
    const a = (await openStore(`file:${path}`)) as LibsqlLightningStore;
    expect(String((await pragma(a, "PRAGMA journal_mode"))[0]![0])).toBe("wal");
    expect(Number((await pragma(a, "PRAGMA synchronous"))[0]![0])).toBe(1);
    const r = await a.enqueueRollout({ q: "kept" }, { metadata: { k: [1, 2] } });
    await a.close();
    expect(existsSync(path)).toBe(true);
    const b = await openStore(`file:${path}`);
    expect(await b.getRolloutById(r.rollout_id)).toEqual(r);
    expect((await b.dequeueRollout())!.rollout_id).toBe(r.rollout_id);
    await b.close();
  });

  it('synchronous: "full" is applied; an unknown value is a ValidationError', async () => {
    const s = await LibsqlLightningStore.open(`file:${join(dir, "full.db")}`, { synchronous: "full" });
    expect(Number((await pragma(s, "PRAGMA synchronous"))[0]![0])).toBe(2);
    await s.close();
    await expect(LibsqlLightningStore.open(`file:${join(dir, "x.db")}`, { synchronous: "off" as "full" })).rejects.toBeInstanceOf(ValidationError);
  });

  it("a file store's page cache is 32 MiB by default, cacheSizeMiB sets it, a bad value is a ValidationError that creates no file", async () => {
    const d = await LibsqlLightningStore.open(`file:${join(dir, "cache-default.db")}`);
    expect(Number((await pragma(d, "PRAGMA cache_size"))[0]![0])).toBe(-DEFAULT_CACHE_SIZE_MIB * 1024);
    expect(DEFAULT_CACHE_SIZE_MIB).toBe(32);
    await d.close();
    const s = await LibsqlLightningStore.open(`file:${join(dir, "cache-8.db")}`, { cacheSizeMiB: 8 });
    expect(Number((await pragma(s, "PRAGMA cache_size"))[0]![0])).toBe(-8 * 1024);
    await s.close();
    for (const bad of [0, -1, 2.5, Number.NaN, "64" as unknown as number]) {
      const path = join(dir, `cache-bad-${String(bad)}.db`);
      const err = await LibsqlLightningStore.open(`file:${path}`, { cacheSizeMiB: bad }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ValidationError);
      expect((err as ValidationError).issues[0]!.path).toEqual(["cacheSizeMiB"]);
      expect(existsSync(path)).toBe(false);
    }
  });

  it("calls after close fail loudly instead of touching a closed database", async () => {
    const s = await LibsqlLightningStore.open(":memory:");
    await s.close();
    await s.close();
    await expect(s.enqueueRollout(1)).rejects.toThrow(/closed/);
  });

  it("every kind of span context reads back exactly after reopen (the usual derived one is not stored, but rebuilt)", async () => {
    const path = join(dir, "contexts.db");
    const a = (await openStore(`file:${path}`)) as LibsqlLightningStore;
    const ar = await a.startRollout({ q: "ctx" });
    const base = (k: number) => spanFromAttributes({ rollout_id: ar.rollout_id, attempt_id: ar.attempt.attempt_id, sequence_id: k, name: `s${k}` });
    const derived = base(1);
    const remote = { ...base(2) };
    remote.context = { ...remote.context!, is_remote: true };
    const traceState = { ...base(3) };
    traceState.context = { ...traceState.context!, trace_state: { vendor: "x" } };
    const extraKey = { ...base(4) };
    extraKey.context = { ...extraKey.context!, sampled: true } as typeof extraKey.context;
    const noContext = { ...base(5), context: null };
    const otherIds = { ...base(6) };
    otherIds.context = { ...otherIds.context!, span_id: "0123456789abcdef" };
    const sent = [derived, remote, traceState, extraKey, noContext, otherIds];
    await a.addManySpans(sent);
    await a.close();
    const b = await openStore(`file:${path}`);
    const back = (await b.querySpans(ar.rollout_id)).items;
    expect(back).toEqual(sent);
    expect(back[0]!.context).toEqual({ trace_id: derived.trace_id, span_id: derived.span_id, is_remote: false, trace_state: {} });
    await b.close();
  });
});
