/**
 * Span sequence counters on libSQL: a rollout's counter is the larger of its `span_sequences` row and
 * the largest sequence_id among its stored spans, so inserting spans raises it without a write of its
 * own. These tests pin down what that must still guarantee: ids handed out come after every span's id,
 * also one another connection stored or one refused as a duplicate, and across reopening.
 */
import { createRequire } from "node:module";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LibsqlLightningStore, MAX_COUNTED_SEQUENCE_ID } from "../../src/store/index.ts";
import { spanFromAttributes, type AttemptedRollout, type Span } from "../../src/types/index.ts";

interface RawDb {
  prepare(sql: string): { raw(on: boolean): { all(args?: unknown[]): unknown[][] } };
  close(): void;
}
const Database = createRequire(import.meta.url)("libsql") as new (path: string) => RawDb;

const dir = mkdtempSync(join(tmpdir(), "libsql-sequences-"));
let n = 0;
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const newPath = () => join(dir, `s${n++}.db`);
const span = (ar: AttemptedRollout, seq: number, spanId?: string): Span => {
  const s = spanFromAttributes({ rollout_id: ar.rollout_id, attempt_id: ar.attempt.attempt_id, sequence_id: seq, name: `s${seq}` });
  return spanId === undefined ? s : { ...s, span_id: spanId, context: { ...s.context!, span_id: spanId } };
};

/** The `span_sequences` rows of a file, read on a connection of its own. */
function counterRows(path: string): unknown[][] {
  const db = new Database(path);
  try {
    return db.prepare(`SELECT "rollout_id", "value" FROM "span_sequences" ORDER BY "rollout_id"`).raw(true).all();
  } finally {
    db.close();
  }
}

describe("libSQL span sequence counters", () => {
  it("stored spans raise the counter with no counter row; handed-out ids are written", async () => {
    const path = newPath();
    const store = await LibsqlLightningStore.open(`file:${path}`);
    const ar = await store.startRollout(1);
    await store.addManySpans([span(ar, 3), span(ar, 9), span(ar, 4)]);
    await store.addSpan(span(ar, 2));
    expect(counterRows(path)).toEqual([]);
    expect(await store.getNextSpanSequenceId(ar.rollout_id, ar.attempt.attempt_id)).toBe(10);
    expect(
      await store.getManySpanSequenceIds([
        [ar.rollout_id, "x"],
        [ar.rollout_id, "y"],
      ]),
    ).toEqual([11, 12]);
    expect(counterRows(path)).toEqual([[ar.rollout_id, 12]]);
    // An explicit id below the counter leaves it; one above raises it.
    await store.addSpan(span(ar, 5));
    expect(await store.getNextSpanSequenceId(ar.rollout_id, "x")).toBe(13);
    await store.addSpan(span(ar, 40));
    expect(await store.getNextSpanSequenceId(ar.rollout_id, "x")).toBe(41);
    await store.close();
  });

  it("another connection's spans and ids count", async () => {
    const path = newPath();
    const a = await LibsqlLightningStore.open(`file:${path}`);
    const b = await LibsqlLightningStore.open(`file:${path}`);
    const ar = await a.startRollout(1);
    expect(await a.getNextSpanSequenceId(ar.rollout_id, "x")).toBe(1);
    await b.addSpan(span(ar, 7));
    expect(await a.getNextSpanSequenceId(ar.rollout_id, "x")).toBe(8);
    expect(await b.getNextSpanSequenceId(ar.rollout_id, "x")).toBe(9);
    await b.addSpan(span(ar, 20));
    expect(await a.getNextSpanSequenceId(ar.rollout_id, "x")).toBe(21);
    await a.close();
    await b.close();
  });

  it.each([
    ["cached", true],
    ["not cached", false],
  ])("a duplicate refused with a higher explicit id still raises the counter (counter %s)", async (_name, cached) => {
    const path = newPath();
    const store = await LibsqlLightningStore.open(`file:${path}`);
    const ar = await store.startRollout(1);
    expect(await store.addSpan(span(ar, 3, "00000000000000aa"))).not.toBeNull();
    let other = store;
    if (cached) expect(await store.getNextSpanSequenceId(ar.rollout_id, "x")).toBe(4);
    else {
      // A second connection has no counter cached: its write of the refused id goes straight to SQL.
      other = await LibsqlLightningStore.open(`file:${path}`);
    }
    expect(await other.addSpan(span(ar, 30, "00000000000000aa"))).toBeNull();
    expect(await other.addManySpans([span(ar, 50, "00000000000000aa"), span(ar, 8, "00000000000000bb")])).toHaveLength(1);
    expect(await store.getNextSpanSequenceId(ar.rollout_id, "x")).toBe(51);
    expect((await store.querySpans(ar.rollout_id)).items.map((s) => s.sequence_id)).toEqual([3, 8]);
    if (other !== store) await other.close();
    await store.close();
  });

  it("a batch refused whole raises each rollout's counter to its largest id", async () => {
    const path = newPath();
    const store = await LibsqlLightningStore.open(`file:${path}`);
    const r1 = await store.startRollout(1);
    const r2 = await store.startRollout(2);
    const original = [span(r1, 1), span(r2, 1), span(r1, 2), span(r2, 2)];
    expect(await store.addManySpans(original)).toHaveLength(4);
    // The batch again (a client's retry) from a connection with no counter cached, with other ids: the
    // largest of each rollout is in the middle, so neither the first nor the last id of a rollout will do.
    const other = await LibsqlLightningStore.open(`file:${path}`);
    const resent = (i: number, seq: number): Span => ({ ...original[i]!, sequence_id: seq });
    const retry = [resent(0, 7), resent(1, 4), resent(2, 90), resent(3, 30), resent(0, 12), resent(1, 5)];
    expect(await other.addManySpans(retry)).toEqual([]);
    expect(await store.getNextSpanSequenceId(r1.rollout_id, "x")).toBe(91);
    expect(await store.getNextSpanSequenceId(r2.rollout_id, "x")).toBe(31);
    await other.close();
    await store.close();
  });

  it("the counter survives reopening, from the counter row or from the spans", async () => {
    const path = newPath();
    let store = await LibsqlLightningStore.open(`file:${path}`);
    const r1 = await store.startRollout(1);
    const r2 = await store.startRollout(2);
    expect(
      await store.getManySpanSequenceIds([
        [r1.rollout_id, "x"],
        [r1.rollout_id, "x"],
        [r1.rollout_id, "x"],
      ]),
    ).toEqual([1, 2, 3]);
    await store.addSpan(span(r2, 17));
    await store.close();
    store = await LibsqlLightningStore.open(`file:${path}`);
    expect(await store.getNextSpanSequenceId(r1.rollout_id, "x")).toBe(4);
    expect(await store.getNextSpanSequenceId(r2.rollout_id, "x")).toBe(18);
    // A rollout that does not exist (ids are not checked) starts at 1.
    expect(await store.getNextSpanSequenceId("ro-ffffffffffff", "x")).toBe(1);
    await store.close();
  });

  it("an id above MAX_COUNTED_SEQUENCE_ID counts as the ceiling, also when read from SQL or refused as a duplicate", async () => {
    const path = newPath();
    const store = await LibsqlLightningStore.open(`file:${path}`);
    const r1 = await store.startRollout(1);
    const r2 = await store.startRollout(2);
    await store.addSpan(span(r1, Number.MAX_SAFE_INTEGER, "00000000000000aa"));
    await store.addSpan(span(r2, 1, "00000000000000aa"));
    // A second connection has neither counter cached: r1's comes from its spans, r2's refused id goes straight to SQL.
    const other = await LibsqlLightningStore.open(`file:${path}`);
    expect(await other.addSpan(span(r2, Number.MAX_SAFE_INTEGER, "00000000000000aa"))).toBeNull();
    expect(await other.getNextSpanSequenceId(r1.rollout_id, "x")).toBe(MAX_COUNTED_SEQUENCE_ID + 1);
    expect(await other.getNextSpanSequenceId(r2.rollout_id, "x")).toBe(MAX_COUNTED_SEQUENCE_ID + 1);
    await other.close();
    await store.close();
  });
});
