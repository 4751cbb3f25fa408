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
    await expect(LibsqlLightningStore.open(`file:${join(dir, "x.db")}`, { synchronous: "off" as "full" })).rejects.toBeInstanceOf(
      ValidationError,
    );
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

  it("every kind of span status, context, parent, links and resource reads back exactly after reopen (derived or empty ones are not stored, but rebuilt)", async () => {
    const path = join(dir, "contexts.db");
    const a = (await openStore(`file:${path}`)) as LibsqlLightningStore;
    const ar = await a.startRollout({ q: "ctx" });
    const base = (k: number) =>
      spanFromAttributes({ rollout_id: ar.rollout_id, attempt_id: ar.attempt.attempt_id, sequence_id: k, name: `s${k}` });
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
    // The parent, links and resource: left out of the body when derived or empty, kept otherwise.
    const child = spanFromAttributes({
      rollout_id: ar.rollout_id,
      attempt_id: ar.attempt.attempt_id,
      sequence_id: 7,
      parent_id: derived.span_id,
      trace_id: derived.trace_id,
    });
    const remoteParent = { ...child, sequence_id: 8, span_id: "00000000000000a8" };
    remoteParent.context = { ...remoteParent.context!, span_id: "00000000000000a8" };
    remoteParent.parent = { ...remoteParent.parent!, is_remote: true };
    const parentWithoutId = { ...base(9), parent: { trace_id: "t", span_id: "p", is_remote: false, trace_state: {} } };
    const idWithoutParent = { ...base(10), parent_id: "00000000000000ff", parent: null };
    const parentOtherTrace = { ...child, sequence_id: 11, span_id: "00000000000000b1" };
    parentOtherTrace.context = { ...parentOtherTrace.context!, span_id: "00000000000000b1" };
    parentOtherTrace.parent = { ...parentOtherTrace.parent!, trace_id: "ffffffffffffffffffffffffffffffff" };
    const linked = {
      ...base(12),
      links: [{ context: { trace_id: "t", span_id: "s", is_remote: false, trace_state: {} }, attributes: null }],
    };
    const resourced = { ...base(13), resource: { attributes: { "service.name": "agent" }, schema_url: "" } };
    const schemaUrl = { ...base(14), resource: { attributes: {}, schema_url: "https://opentelemetry.io/schemas/1.21.0" } };
    // The status: a code without a description is stored as the code alone; the others whole.
    const described = { ...base(15), status: { status_code: "ERROR" as const, description: "boom" } };
    const statusExtra = { ...base(16), status: { status_code: "UNSET" as const, description: null, origin: "x" } };
    const withEvent = { ...base(17), events: [{ name: "reward", attributes: { value: 1 }, timestamp: 1.5 }] };
    const sent = [
      derived,
      remote,
      traceState,
      extraKey,
      noContext,
      otherIds,
      child,
      remoteParent,
      parentWithoutId,
      idWithoutParent,
      parentOtherTrace,
      linked,
      resourced,
      schemaUrl,
      described,
      statusExtra,
      withEvent,
    ];
    await a.addManySpans(sent);
    await a.close();
    const b = await openStore(`file:${path}`);
    const back = (await b.querySpans(ar.rollout_id)).items;
    expect(back).toEqual(sent);
    expect(back[0]!.context).toEqual({ trace_id: derived.trace_id, span_id: derived.span_id, is_remote: false, trace_state: {} });
    await b.close();
    // What is stored: the derived or empty fields are absent from the body, the others are there.
    const { default: Database } = (await import("libsql")) as unknown as {
      default: new (p: string) => { prepare(q: string): { raw(): { all(): unknown[][] } }; close(): void };
    };
    const db = new Database(path);
    const bodies = new Map(
      db
        .prepare(`SELECT "sequence_id", "body" FROM "spans"`)
        .raw()
        .all()
        .map((r) => [r[0] as number, JSON.parse(r[1] as string) as Record<string, unknown>]),
    );
    db.close();
    // base() spans have no attributes, events or links, and a derived context: only the status is stored.
    for (const k of [1, 7]) expect(bodies.get(k)).toEqual({ status: "OK" });
    expect(bodies.get(13)!.attributes).toBeUndefined();
    expect(bodies.get(17)!.events).toEqual(withEvent.events);
    expect(bodies.get(15)!.status).toEqual(described.status);
    expect(bodies.get(16)!.status).toEqual(statusExtra.status);
    expect(bodies.get(8)!.parent).toEqual(remoteParent.parent);
    expect(bodies.get(9)!.parent).toEqual(parentWithoutId.parent);
    expect(bodies.get(10)!.parent).toBeNull();
    expect(bodies.get(11)!.parent).toEqual(parentOtherTrace.parent);
    expect(bodies.get(12)!.links).toEqual(linked.links);
    expect(bodies.get(13)!.resource).toEqual(resourced.resource);
    expect(bodies.get(14)!.resource).toEqual(schemaUrl.resource);
  });
});
