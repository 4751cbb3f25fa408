/**
 * Bad input leaves a libSQL database unchanged: a failing batch commits nothing, also when the failure
 * comes from SQL or serialisation after earlier rows of the same transaction were written; and in a
 * group commit, one bad caller does not fail the others.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LibsqlLightningStore } from "../../src/store/index.ts";
import { MAX_BIND_PARAMS } from "../../src/store/libsql/storage.ts";
import { NotFoundError, ValidationError, spanFromAttributes, type AttemptedRollout, type Span } from "../../src/types/index.ts";

const dir = mkdtempSync(join(tmpdir(), "libsql-atomicity-"));
let n = 0;
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const open = () => LibsqlLightningStore.open(`file:${join(dir, `a${n++}.db`)}`);
const span = (ar: AttemptedRollout, seq: number, extra: Record<string, unknown> = {}): Span =>
  ({
    ...spanFromAttributes({ rollout_id: ar.rollout_id, attempt_id: ar.attempt.attempt_id, sequence_id: seq, name: `s${seq}` }),
    ...extra,
  }) as Span;

/** Everything a failed write could have touched. */
async function snapshot(store: LibsqlLightningStore, ar: AttemptedRollout) {
  const { uptime: _u, ...stats } = await store.statistics();
  return {
    stats,
    spans: await store.querySpans(ar.rollout_id),
    rollout: await store.getRolloutById(ar.rollout_id),
    attempts: await store.queryAttempts(ar.rollout_id),
  };
}

describe("LibsqlLightningStore: a failing batch commits nothing", () => {
  it("a batch spanning several multi-row INSERT statements whose last span cannot be stored rolls back entirely", async () => {
    const store = await open();
    const ar = await store.startRollout(1);
    await store.addSpan(span(ar, 1));
    const before = await snapshot(store, ar);
    // Far more rows than one INSERT statement takes, so earlier chunks are written before the bad one.
    const count = Math.ceil((MAX_BIND_PARAMS / 10) * 2.5);
    const batch = Array.from({ length: count }, (_, i) => span(ar, i + 2));
    batch[count - 1] = span(ar, count + 1, { extra_bigint: 10n });
    await expect(store.addManySpans(batch)).rejects.toBeInstanceOf(ValidationError);
    expect(await snapshot(store, ar)).toEqual(before);
    // The sequence counter was raised inside the transaction and rolled back with it.
    expect(await store.getNextSpanSequenceId(ar.rollout_id, ar.attempt.attempt_id)).toBe(2);
    await store.close();
  });

  it("a batch naming an unknown attempt writes nothing, not even for the valid spans before it", async () => {
    const store = await open();
    const ar = await store.startRollout(1);
    const before = await snapshot(store, ar);
    const bad = { ...span(ar, 3), attempt_id: "at-000000000000" };
    await expect(store.addManySpans([span(ar, 1), span(ar, 2), bad])).rejects.toBeInstanceOf(NotFoundError);
    expect(await snapshot(store, ar)).toEqual(before);
    expect((await store.getRolloutById(ar.rollout_id))!.status).toBe("preparing");
    await store.close();
  });

  it("enqueueManyRollouts with one unstorable input stores none of them", async () => {
    const store = await open();
    await expect(store.enqueueManyRollouts([{ input: 1 }, { input: { big: 1n } }])).rejects.toBeInstanceOf(ValidationError);
    expect((await store.statistics()).total_rollouts).toBe(0);
    expect(await store.dequeueRollout()).toBeNull();
    await store.close();
  });

  it("concurrent addSpan callers share one transaction, yet a bad caller fails alone", async () => {
    const store = await open();
    const ar = await store.startRollout(1);
    const calls = Array.from({ length: 50 }, (_, i) => store.addSpan(i === 25 ? span(ar, i + 1, { bad: 1n }) : span(ar, i + 1)));
    const unknown = store.addSpan({ ...span(ar, 99), rollout_id: "ro-000000000000" });
    const settled = await Promise.allSettled([...calls, unknown]);
    expect(settled.filter((s) => s.status === "rejected")).toHaveLength(2);
    expect((settled[25] as PromiseRejectedResult).reason).toBeInstanceOf(ValidationError);
    expect((settled[50] as PromiseRejectedResult).reason).toBeInstanceOf(NotFoundError);
    const stored = await store.querySpans(ar.rollout_id);
    expect(stored.total).toBe(49);
    expect(stored.items.map((s) => s.sequence_id)).toEqual([...Array(50).keys()].map((i) => i + 1).filter((s) => s !== 26));
    await store.close();
  });

  it("a batch of several INSERT statements with duplicates scattered through it returns exactly the new spans, in order", async () => {
    const store = await open();
    const ar = await store.startRollout(1);
    const count = Math.ceil((MAX_BIND_PARAMS / 10) * 2.5);
    const all = Array.from({ length: count }, (_, i) => span(ar, i + 1));
    const existing = all.filter((_, i) => i % 7 === 3);
    await store.addManySpans(existing);
    const out = await store.addManySpans(all);
    expect(out.map((s) => s.span_id)).toEqual(all.filter((_, i) => i % 7 !== 3).map((s) => s.span_id));
    expect((await store.statistics()).total_spans).toBe(count);
    await store.close();
  });

  it("repeats within one batch, in the same INSERT and across INSERTs, keep only each span's first copy", async () => {
    const store = await open();
    const ar = await store.startRollout(1);
    const perStatement = Math.floor(MAX_BIND_PARAMS / 10);
    const count = perStatement * 2 + 10;
    const all = Array.from({ length: count }, (_, i) => span(ar, i + 1));
    // A copy right after its original (same statement), and copies of first-statement spans placed in the
    // second and third statements; each copy has another name, so a kept copy would show.
    const batch = [...all];
    const copy = (i: number) => ({ ...all[i]!, name: `copy of ${i}` });
    batch.splice(6, 0, copy(5));
    batch.splice(perStatement + 100, 0, copy(10), copy(11));
    batch.push(copy(12), copy(perStatement + 50));
    const out = await store.addManySpans(batch);
    expect(out.map((s) => s.span_id)).toEqual(all.map((s) => s.span_id));
    expect(out.every((s) => !s.name.startsWith("copy"))).toBe(true);
    const stored = await store.querySpans(ar.rollout_id, { limit: -1 });
    expect(stored.total).toBe(count);
    expect(stored.items.filter((s) => s.name.startsWith("copy"))).toEqual([]);
    await store.close();
  });
});
