/**
 * Rows of the libSQL store kept in this process between transactions, and row writes (and queue
 * pushes, and changes to the row counters) held back until the transaction commits. Why: a rollout's
 * life is ~30 small statements, each costing far more in the binding than the row work itself; with the
 * rows at hand, most reads need no statement, and the writes of a whole group commit (driver.ts) go out
 * as a few multi-row upserts just before COMMIT.
 *
 * Correctness rests on three rules:
 * - **Valid only while nobody else writes.** Every transaction starts with `PRAGMA data_version` (it
 *   changes when ANOTHER connection commits); on a change everything cached is dropped. Drivers where
 *   that proves nothing (a remote server) drop the cache at every transaction start, so rows are then
 *   only reused within one transaction.
 * - **A held-back row is always cached** (dirty => cached), and the latest attempt of a rollout with a
 *   held-back attempt is always known; so a point read that misses the cache may go to SQL, while a
 *   query over a table (filters, counts) first writes out what is held back (`flush`).
 * - **A failing caller leaves no trace.** The storage runs each caller between `startMember` and
 *   `endMember(ok)`; every change to the cache is logged and undone in reverse order on failure (the
 *   driver rolls the caller's statements back to its savepoint). A rollback of the whole transaction
 *   drops everything (`clear`).
 * Cached rows are frozen all the way down: the core hands them to callers as they are (docs/departures.md#9).
 *
 * Memory is bounded by bytes, not rows (rows range from a few hundred bytes to many MiB: a rollout's
 * input is whatever the caller sent). Each row cached adds an estimate to `bytes` (`rowBytes`, from the
 * SQL text already at hand); when it passes the budget at a point where nothing is held back (a
 * transaction's start, the end of a read, or just before a write commits, once the held-back rows are
 * written), everything is dropped and rows are read from SQL again as needed. `bytes` is not reduced when a row is replaced,
 * so it is an upper bound of what the cache holds (docs/store.md).
 */
import type { SqlConn, SqlValue } from "./driver.ts";
import { MAX_BIND_PARAMS, chunkSizes, multiRowSql, quoted } from "./sql.ts";

/** `... IN ((?), (?), ...)`: a parenthesised placeholder is a plain scalar in an IN list. */
const DELETE_QUEUED = multiRowSql(`DELETE FROM "queue" WHERE "id" IN (`, 1, `)`);
const INSERT_QUEUED = multiRowSql(`INSERT INTO "queue" ("rollout_id") VALUES `, 1, "");
/** Adds to the row counters (schema.ts `rowCounts`), making a counter missing so far. */
const ADD_TO_COUNTERS = multiRowSql(
  `INSERT INTO "row_counts" ("name", "n") VALUES `,
  2,
  ` ON CONFLICT ("name") DO UPDATE SET "n" = "n" + excluded."n"`,
);

/** Runs `sql(rows)` over `values` (`cols` parameters per row, rows one after another), a chunk of rows at a time. */
async function inChunks(c: SqlConn, values: SqlValue[], sql: (rows: number) => string, cols = 1): Promise<void> {
  let row = 0;
  for (const size of chunkSizes(values.length / cols, Math.floor(MAX_BIND_PARAMS / cols))) {
    await c.run(sql(size), size * cols === values.length ? values : values.slice(row * cols, (row + size) * cols));
    row += size;
  }
}

/** Default budget of the row cache (see `rowCacheMiB` in store.ts). */
export const DEFAULT_ROW_CACHE_MIB = 64;

/** What a cached row costs beyond its text: the row object, its Map entry, the key string. */
const ROW_OVERHEAD_BYTES = 256;

/**
 * The estimated heap a cached row keeps alive, from its SQL values (the first `count`): each string
 * twice (the parsed value, and its JSON text, which tables.ts keeps for a frozen object it encoded;
 * or a string's two bytes per character outside Latin-1), plus a fixed overhead.
 */
export function rowBytes(values: ArrayLike<SqlValue>, count = values.length): number {
  let n = ROW_OVERHEAD_BYTES;
  for (let i = 0; i < count; i++) {
    const v = values[i];
    n += typeof v === "string" ? 2 * v.length : 8;
  }
  return n;
}

/** A held-back row: its SQL values, and whether it is new (written with a plain INSERT). */
export interface HeldRow {
  values: SqlValue[];
  isNew: boolean;
}

/** One table's cached rows (`null`: known not to exist) and the rows waiting to be written. */
export class CachedTable<V> {
  readonly rows = new Map<string, V | null>();
  /** Key -> the held-back row, in first-write order (new rows get their rowids in that order). */
  readonly dirty = new Map<string, HeldRow>();
  private readonly upsert: (rows: number) => string;
  /** New rows go in with a plain INSERT: a duplicate key fails loudly instead of overwriting a row. */
  private readonly insert: (rows: number) => string;

  constructor(
    readonly table: string,
    private readonly columns: readonly string[],
    key: readonly string[],
    /** The columns an update rewrites (the upsert's SET clause); default: every non-key column. */
    updatable: readonly string[] = columns.filter((c) => !key.includes(c)),
  ) {
    const update = updatable.map((c) => `"${c}" = excluded."${c}"`).join(", ");
    const head = `INSERT INTO "${table}" (${quoted(columns)}) VALUES `;
    this.upsert = multiRowSql(head, columns.length, ` ON CONFLICT (${quoted(key)}) DO UPDATE SET ${update}`);
    this.insert = multiRowSql(head, columns.length, "");
  }

  /** Writes every held-back row with multi-row statements (a few fixed statement shapes). */
  async flush(c: SqlConn): Promise<void> {
    // Each kind's values, row after row.
    const fresh: SqlValue[] = [];
    const changed: SqlValue[] = [];
    for (const row of this.dirty.values()) {
      const into = row.isNew ? fresh : changed;
      for (const v of row.values) into.push(v);
    }
    await inChunks(c, fresh, this.insert, this.columns.length);
    await inChunks(c, changed, this.upsert, this.columns.length);
  }
}

export class RowCache {
  private readonly tables: CachedTable<unknown>[] = [];
  /** Per rollout: its latest attempt (`null`: it has none). */
  readonly latest = new Map<string, unknown>();
  /** Rollout ids pushed onto the queue and not yet written: they come after every queued row in SQL. */
  readonly queued: string[] = [];
  /**
   * The front of the queue as read from SQL, [queue row id, rollout id], minus what was popped since:
   * dequeues take from here, and one read serves a whole group of them. Read only when empty (then,
   * with the popped rows deleted first, SQL's front is the queue's front).
   */
  readonly head: [number, string][] = [];
  /** Queue row ids popped from `head` and not yet deleted in SQL. */
  readonly popped: number[] = [];
  /** Changes to the row counters not yet written: counter name -> change (never 0). */
  readonly counted = new Map<string, number>();
  private undo: (() => void)[] | null = null;
  private version: SqlValue | undefined = undefined;
  /** Estimated bytes of the rows cached since the last drop (an upper bound: replaced rows are not taken off). */
  bytes = 0;

  constructor(
    private readonly versioned: boolean,
    /** Bytes (`bytes`) above which everything is dropped at the next safe point. */
    readonly budgetBytes: number = DEFAULT_ROW_CACHE_MIB * 2 ** 20,
  ) {}

  table<V>(t: CachedTable<V>): CachedTable<V> {
    this.tables.push(t as CachedTable<unknown>);
    return t;
  }

  /** Transaction start: keep the cache only if no other connection has committed since the last look. */
  begin(c: SqlConn): void | Promise<void> {
    if (!this.versioned) return this.clear();
    const row = c.get("PRAGMA data_version");
    if (row instanceof Promise) return row.then((r) => this.checkVersion(r?.[0]));
    this.checkVersion(row?.[0]);
  }

  private checkVersion(v: SqlValue | undefined): void {
    if (v !== this.version || this.bytes > this.budgetBytes) this.clear();
    this.version = v;
  }

  /**
   * Drops everything if the cache is over its budget and nothing is held back (a read is done, or a
   * write transaction's rows just went out): a cache that fills up is not left so until the next transaction.
   */
  trim(): void {
    if (this.bytes > this.budgetBytes && !this.dirty) this.clear();
  }

  get dirty(): boolean {
    if (this.queued.length > 0 || this.popped.length > 0 || this.counted.size > 0) return true;
    for (const t of this.tables) if (t.dirty.size > 0) return true;
    return false;
  }

  clear(): void {
    for (const t of this.tables) {
      t.rows.clear();
      t.dirty.clear();
    }
    this.latest.clear();
    this.queued.length = 0;
    this.head.length = 0;
    this.popped.length = 0;
    this.counted.clear();
    this.bytes = 0;
  }

  startMember(): void {
    this.undo = [];
  }

  endMember(ok: boolean): void {
    const undo = this.undo;
    this.undo = null;
    if (!ok && undo) for (let i = undo.length - 1; i >= 0; i--) undo[i]!();
  }

  /**
   * Caches a row read from SQL (it needs no undo: it was committed, or written by this transaction);
   * `bytes`: its estimate (`rowBytes` of its SQL values; the default fits a row without text or null).
   */
  remember<V>(t: CachedTable<V>, key: string, row: V | null, bytes = ROW_OVERHEAD_BYTES): void {
    t.rows.set(key, row);
    this.bytes += bytes;
  }

  /**
   * Caches a row and holds back its write (`values`: its SQL values; `isNew`: the row is not in SQL,
   * so it is INSERTed, and a duplicate key fails instead of overwriting).
   */
  put<V>(t: CachedTable<V>, key: string, row: V, values: SqlValue[], isNew = false): void {
    if (this.undo) {
      const had = t.rows.has(key);
      const prev = t.rows.get(key);
      const prevValues = t.dirty.get(key);
      this.undo.push(() => {
        if (had) t.rows.set(key, prev as V | null);
        else t.rows.delete(key);
        if (prevValues === undefined) t.dirty.delete(key);
        else t.dirty.set(key, prevValues);
      });
    }
    const held = t.dirty.get(key);
    t.rows.set(key, row);
    t.dirty.set(key, { values, isNew: isNew || (held?.isNew ?? false) });
    this.bytes += rowBytes(values);
  }

  /** Caches a row whose write already went to SQL (it is rolled back with the caller's savepoint); `bytes` as in `remember`. */
  putWritten<V>(t: CachedTable<V>, key: string, row: V, bytes = ROW_OVERHEAD_BYTES): void {
    this.bytes += bytes;
    if (this.undo) {
      const had = t.rows.has(key);
      const prev = t.rows.get(key);
      this.undo.push(() => (had ? t.rows.set(key, prev as V | null) : t.rows.delete(key)));
    }
    t.rows.set(key, row);
  }

  setLatest(rolloutId: string, attempt: unknown): void {
    if (this.undo) {
      const had = this.latest.has(rolloutId);
      const prev = this.latest.get(rolloutId);
      this.undo.push(() => (had ? this.latest.set(rolloutId, prev) : this.latest.delete(rolloutId)));
    }
    this.latest.set(rolloutId, attempt);
  }

  /**
   * Adds `change` to a row counter (a table's rows, a status's rollouts), written with the held-back rows:
   * one statement a commit for all counters, instead of one per row or per insert.
   */
  count(name: string, change: number): void {
    this.addCount(name, change);
    this.undo?.push(() => this.addCount(name, -change));
  }

  private addCount(name: string, change: number): void {
    const n = (this.counted.get(name) ?? 0) + change;
    if (n === 0) this.counted.delete(name);
    else this.counted.set(name, n);
  }

  /** Writes out the counter changes (inside a caller: restored if its savepoint rolls the statement back). */
  private async flushCounts(c: SqlConn): Promise<void> {
    if (this.counted.size === 0) return;
    const changes = [...this.counted];
    this.counted.clear();
    this.undo?.push(() => {
      for (const [name, change] of changes) this.addCount(name, change);
    });
    await inChunks(c, changes.flat(), ADD_TO_COUNTERS, 2);
  }

  /** Logs the queue state as it is now, to be restored if the caller fails (the lists are short). */
  private saveQueue(): void {
    if (!this.undo) return;
    const queued = [...this.queued];
    const head = [...this.head];
    const popped = [...this.popped];
    this.undo.push(() => {
      this.queued.splice(0, this.queued.length, ...queued);
      this.head.splice(0, this.head.length, ...head);
      this.popped.splice(0, this.popped.length, ...popped);
    });
  }

  /** Holds back queue pushes (appended in order at the flush). */
  enqueue(ids: readonly string[]): void {
    this.saveQueue();
    for (const id of ids) this.queued.push(id);
  }

  /** Takes up to `n` rollout ids from the front: the rows read from SQL, then the held-back pushes. */
  dequeue(n: number): string[] {
    this.saveQueue();
    const out: string[] = [];
    for (const [rowId, rolloutId] of this.head.splice(0, n)) {
      this.popped.push(rowId);
      out.push(rolloutId);
    }
    if (out.length < n && this.head.length === 0) for (const id of this.queued.splice(0, n - out.length)) out.push(id);
    return out;
  }

  /** Rows read from SQL's front of the queue (only while `head` is empty and nothing popped is pending). */
  fillHead(rows: readonly [number, string][]): void {
    this.saveQueue();
    for (const r of rows) this.head.push(r);
  }

  /** Writes out the held-back pops and pushes only (see `flush`). */
  async flushQueue(c: SqlConn): Promise<void> {
    if (this.popped.length === 0 && this.queued.length === 0) return;
    this.saveQueue();
    // Plain parameter lists in a few fixed shapes (chunkSizes): unpacking a JSON list with json_each
    // cost ~25 us a statement, more than the rows themselves.
    if (this.popped.length > 0) await inChunks(c, this.popped.splice(0), DELETE_QUEUED);
    // Multi-row VALUES insert in list order, so the new rows' ids keep the FIFO order.
    if (this.queued.length > 0) await inChunks(c, this.queued.splice(0), INSERT_QUEUED);
  }

  /**
   * Writes out every held-back row. Inside a caller (a query in a write transaction) the statements
   * fall under its savepoint: if it fails they are rolled back, so the rows become held back again.
   */
  async flush(c: SqlConn): Promise<void> {
    await this.flushQueue(c);
    await this.flushCounts(c);
    for (const t of this.tables) {
      if (t.dirty.size === 0) continue;
      await t.flush(c);
      if (this.undo) {
        const written = [...t.dirty];
        this.undo.push(() => {
          for (const [k, v] of written) if (!t.dirty.has(k)) t.dirty.set(k, v);
        });
      }
      t.dirty.clear();
    }
  }
}
