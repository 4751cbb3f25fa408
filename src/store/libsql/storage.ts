/**
 * `Storage` (../storage.ts) over libSQL: each core transaction is one SQL transaction on a `SqlDriver`
 * (write = `BEGIN IMMEDIATE`, so two processes sharing a file serialise their writes and a dequeue can
 * never hand one rollout to two workers). Rows go in and out through the converters of tables.ts;
 * queries are pushed down into SQL by query-sql.ts.
 *
 * Rollouts, attempts, workers, span counters and resources are kept in a `RowCache` (row-cache.ts)
 * between transactions, checked against other writers at every transaction start; rollout, attempt,
 * worker and counter writes are held back and go out as multi-row upserts just before the commit.
 * The queue's front is cached too: pops take from it and their deletes are held back, as are pushes
 * (they follow every queued row already in SQL). Spans and resources are written at once.
 * On the embedded driver every statement is synchronous, so a method served from the cache or the
 * binding returns its value directly (no promise on the hot path).
 */
import type { Attempt, PaginatedResult, ResourcesUpdate, Rollout, Span, Worker } from "../../types/index.ts";
import { newWorker } from "../../types/index.ts";
import { MAX_COUNTED_SEQUENCE_ID, countedSequenceId, watchdogDeadline } from "../decisions.ts";
import { deepFreeze } from "../owned.ts";
import { runQuery, type QuerySpec } from "../query.ts";
import {
  ATTEMPT_FIXED_FIELDS,
  ROLLOUT_FIXED_FIELDS,
  WORKER_FIXED_FIELDS,
  type AttemptPatchRow,
  type CollectionName,
  type DueRollout,
  type MaybePromise,
  type RolloutPatchRow,
  type Rows,
  type Storage,
  type StorageTx,
  type TxMode,
  type WorkerPatchRow,
} from "../storage.ts";
import type { SqlConn, SqlDriver, SqlRow, SqlValue, TxHooks } from "./driver.ts";
import { countersFor, planMust, planQuery, statusCounter } from "./query-sql.ts";
import { CachedTable, DEFAULT_ROW_CACHE_MIB, RowCache, rowBytes } from "./row-cache.ts";
import { MAX_BIND_PARAMS, chunkSizes, multiRowSql, quoted } from "./sql.ts";
import {
  ATTEMPT_ROW_COLUMNS,
  SPAN_COLUMNS,
  SPECS,
  attemptSpec,
  attemptValues,
  resourcesSpec,
  rolloutSpec,
  spanValues,
  workerSpec,
} from "./tables.ts";

export { MAX_BIND_PARAMS } from "./sql.ts";

/** A rollout and its latest attempt (NULL columns when it has none) in one row. */
const SELECT_ROLLOUT_WITH_LATEST =
  `SELECT ${rolloutSpec.columns.map((c) => `r."${c}"`).join(", ")}, ${attemptSpec.columns.map((c) => `a."${c}"`).join(", ")} ` +
  `FROM "rollouts" AS r LEFT JOIN "attempts" AS a ON a."rollout_id" = r."rollout_id" ` +
  `AND a."sequence_id" = (SELECT MAX(b."sequence_id") FROM "attempts" AS b WHERE b."rollout_id" = r."rollout_id") ` +
  `WHERE r."rollout_id" = ?`;
/** The requested attempt and the rollout's latest in one query: the core usually asks for both. */
const SELECT_ATTEMPT_AND_LATEST = `${attemptSpec.select} WHERE "rollout_id" = ? AND ("attempt_id" = ? OR "sequence_id" = (SELECT MAX("sequence_id") FROM "attempts" WHERE "rollout_id" = ?))`;
const SELECT_LATEST_ATTEMPT = `${attemptSpec.select} WHERE "rollout_id" = ? ORDER BY "sequence_id" DESC LIMIT 1`;
/** The latest attempt of each rollout in a JSON list; the index on (rollout_id, sequence_id) finds each max. */
const SELECT_LATEST_ATTEMPTS =
  `${attemptSpec.select} AS a WHERE "rollout_id" IN (SELECT value FROM json_each(?)) ` +
  `AND "sequence_id" = (SELECT MAX(b."sequence_id") FROM "attempts" AS b WHERE b."rollout_id" = a."rollout_id")`;
/**
 * The watchdog's due rollouts: the deadline sits on each rollout's latest attempt (schema.ts), and the
 * partial index on (watchdog_deadline, rollout_id) holds only attempts that have one, so this reads the
 * due rows and nothing else. The second form starts after the previous page's last (deadline, id).
 */
const SELECT_DUE = `SELECT "rollout_id", "watchdog_deadline" FROM "attempts" WHERE "watchdog_deadline" < ? ORDER BY "watchdog_deadline", "rollout_id" LIMIT ?`;
const SELECT_DUE_AFTER =
  `SELECT "rollout_id", "watchdog_deadline" FROM "attempts" WHERE "watchdog_deadline" < ? AND ("watchdog_deadline", "rollout_id") > (?, ?) ` +
  `ORDER BY "watchdog_deadline", "rollout_id" LIMIT ?`;
const READ_QUEUE = `SELECT "id", "rollout_id" FROM "queue" ORDER BY "id" LIMIT ?`;
/** Queue rows read at once when the cached front runs out (one read serves a group of dequeues). */
const QUEUE_READ_AHEAD = 64;
const SELECT_WORKER = `${workerSpec.select} WHERE "worker_id" = ?`;
/**
 * A rollout's span sequence counter: the larger of its `span_sequences` row and the largest sequence_id
 * among its stored spans (the spans index on (rollout_id, sequence_id) finds it), counted only up to
 * MAX_COUNTED_SEQUENCE_ID. So inserting spans raises the counter with no write of its own; only ids
 * handed out (incSequence) and the ids of spans refused as duplicates are written to `span_sequences`.
 */
const SELECT_SEQUENCE =
  `SELECT MAX(COALESCE((SELECT "value" FROM "span_sequences" WHERE "rollout_id" = ?), 0), ` +
  `MIN(COALESCE((SELECT MAX("sequence_id") FROM "spans" WHERE "rollout_id" = ?), 0), ${MAX_COUNTED_SEQUENCE_ID}))`;
/** Raises a counter that is not cached (a refused span's explicit id must still count). */
const CHMAX_SEQUENCE =
  `INSERT INTO "span_sequences" ("rollout_id", "value") VALUES (?, ?) ` +
  `ON CONFLICT ("rollout_id") DO UPDATE SET "value" = MAX("value", excluded."value")`;
const SELECT_RESOURCES = `${resourcesSpec.select} WHERE "resources_id" = ?`;
/** write_order is unique (each write takes MAX + 1 under the write lock), so its index alone finds the latest. */
const SELECT_LATEST_RESOURCES = `${resourcesSpec.select} ORDER BY "write_order" DESC LIMIT 1`;
/** A total from the row counters (schema.ts `rowCounts`): one row read per counter. */
const SUM_COUNTERS = `SELECT COALESCE(SUM("n"), 0) FROM "row_counts" WHERE "name" IN (SELECT value FROM json_each(?))`;
const COLLECTIONS: readonly CollectionName[] = ["rollouts", "attempts", "spans", "resources", "workers"];
const SELECT_COUNTS = `SELECT "name", "n" FROM "row_counts" WHERE "name" IN (${COLLECTIONS.map((c) => `'${c}'`).join(", ")})`;
const INSERT_SPANS = multiRowSql(
  `INSERT INTO "spans" (${quoted(SPAN_COLUMNS)}) VALUES `,
  SPAN_COLUMNS.length,
  ` ON CONFLICT ("rollout_id", "attempt_id", "span_id") DO NOTHING`,
);
// An upsert (not INSERT OR REPLACE) keeps the row's rowid, i.e. its place in insertion order.
const PUT_RESOURCES =
  `INSERT INTO "resources" (${quoted(resourcesSpec.columns)}, "write_order") ` +
  `VALUES (${resourcesSpec.columns.map(() => "?").join(", ")}, (SELECT COALESCE(MAX("write_order"), 0) + 1 FROM "resources")) ` +
  `ON CONFLICT ("resources_id") DO UPDATE SET ` +
  [...resourcesSpec.columns.filter((c) => c !== "resources_id"), "write_order"].map((c) => `"${c}" = excluded."${c}"`).join(", ");

const spanKey = (rid: unknown, aid: unknown, sid: unknown): string => `${rid as string}\u0000${aid as string}\u0000${sid as string}`;
const attemptKey = (rid: string, aid: string): string => `${rid}\u0000${aid}`;

/** Applies `f` to a value that may still be a promise (the embedded driver answers synchronously). */
function then<T, U>(v: MaybePromise<T>, f: (x: T) => MaybePromise<U>): MaybePromise<U> {
  return v instanceof Promise ? v.then(f) : f(v);
}

/** A frozen copy of `row` with the defined fields of `patch` (the cache shares rows with callers). */
function patched<T extends object>(row: T, patch: object, skip: readonly string[]): T {
  const out = { ...row } as Record<string, unknown>;
  for (const k in patch) {
    const v = (patch as Record<string, unknown>)[k];
    // The row's other values are frozen already (cached rows are frozen all the way down).
    if (v !== undefined && !skip.includes(k)) out[k] = deepFreeze(v);
  }
  return Object.freeze(out) as T;
}
/** A row handed over by the core, frozen for the cache (its nested values are the core's frozen copies). */
const frozen = <T extends object>(row: T): T => (Object.isFrozen(row) ? row : deepFreeze({ ...row }));

/** The columns an update rewrites: all but the fixed fields. */
const changing = (columns: readonly string[], fixed: readonly string[]): string[] => columns.filter((c) => !fixed.includes(c));

/** The cache of one storage: which tables it keeps, and how a held-back row is written. */
class StoreCache extends RowCache {
  // start_time never changes: left out of the SET, its index entry is not rewritten on every status change.
  readonly rollouts = this.table(
    new CachedTable<Rollout>("rollouts", rolloutSpec.columns, ["rollout_id"], changing(rolloutSpec.columns, ROLLOUT_FIXED_FIELDS)),
  );
  /** Keyed by `attemptKey`. */
  // An update rewrites only the columns an attempt patch can change (AttemptPatchRow) and the deadline:
  // leaving sequence_id out of the SET spares SQLite rewriting the (rollout_id, sequence_id) index entry
  // on every heartbeat.
  readonly attempts = this.table(
    new CachedTable<Attempt>(
      "attempts",
      ATTEMPT_ROW_COLUMNS,
      ["rollout_id", "attempt_id"],
      changing(ATTEMPT_ROW_COLUMNS, ATTEMPT_FIXED_FIELDS),
    ),
  );
  readonly workers = this.table(new CachedTable<Worker>("workers", workerSpec.columns, ["worker_id"]));
  /** Span sequence counters as SELECT_SEQUENCE defines them (a rollout with neither is cached as 0). */
  readonly sequences = this.table(new CachedTable<number>("span_sequences", ["rollout_id", "value"], ["rollout_id"]));
  /** Written at once (not held back); cached for reads. The key "" holds the latest snapshot. */
  readonly resources = this.table(new CachedTable<ResourcesUpdate>("resources", [], []));
}

/**
 * One core transaction (one caller). Reads come from the storage's cache where it has the row, else
 * from SQL; rollout, attempt, worker and counter writes go to the cache and are written before COMMIT.
 */
export class SqlTx implements StorageTx {
  constructor(
    private readonly c: SqlConn,
    private readonly cache: StoreCache,
  ) {}

  /** Before a statement that reads a whole table: write out what is held back. */
  private flushed<T>(f: () => MaybePromise<T>): MaybePromise<T> {
    return this.cache.dirty ? this.cache.flush(this.c).then(f) : f();
  }

  /** Before a statement that reads the queue table: write out the held-back pops and pushes. */
  private queueFlushed<T>(f: () => MaybePromise<T>): MaybePromise<T> {
    return this.cache.popped.length > 0 || this.cache.queued.length > 0 ? this.cache.flushQueue(this.c).then(f) : f();
  }

  // Rollouts ---------------------------------------------------------------------------------------

  getRollout(id: string): MaybePromise<Rollout | null> {
    const known = this.cache.rollouts.rows.get(id);
    if (known !== undefined) return known;
    // The latest attempt comes along: the core nearly always reads it right after the rollout.
    return then(this.c.get(SELECT_ROLLOUT_WITH_LATEST, [id]), (row) => {
      if (row === undefined) {
        this.cache.remember(this.cache.rollouts, id, null);
        return null;
      }
      const r = deepFreeze(rolloutSpec.fromRow(row));
      this.cache.remember(this.cache.rollouts, id, r, rowBytes(row, rolloutSpec.columns.length));
      if (!this.cache.latest.has(id)) {
        const a = Array.prototype.slice.call(row, rolloutSpec.columns.length) as SqlValue[];
        this.rememberLatest(id, a[0] === null ? null : this.rememberAttempt(a));
      }
      return r;
    });
  }

  insertRollouts(rows: Rollout[]): void {
    for (const row of rows) {
      const r = frozen(row);
      if (this.cache.rollouts.rows.get(r.rollout_id)) throw new Error(`insertRollouts: rollout ${r.rollout_id} already exists`);
      this.cache.put(this.cache.rollouts, r.rollout_id, r, rolloutSpec.values(r), true);
      this.cache.count("rollouts", 1);
      this.cache.count(statusCounter(r.status), 1);
      // A new rollout id has no attempts yet (attempts are only made for existing rollouts).
      this.cache.setLatest(r.rollout_id, null);
    }
  }

  updateRollout(id: string, patch: RolloutPatchRow): MaybePromise<Rollout> {
    return then(this.getRollout(id), (old) => {
      if (!old) throw new Error(`updateRollout: rollout ${id} does not exist`);
      const r = patched(old, patch, ROLLOUT_FIXED_FIELDS);
      this.cache.put(this.cache.rollouts, id, r, rolloutSpec.values(r));
      if (r.status !== old.status) {
        this.cache.count(statusCounter(old.status), -1);
        this.cache.count(statusCounter(r.status), 1);
      }
      // The status and the config move the watchdog deadline kept on the latest attempt.
      if (patch.status === undefined && patch.config === undefined) return r;
      return then(this.getLatestAttempt(id), (latest) => {
        if (latest === null) return r;
        const deadline = watchdogDeadline(r, latest);
        if (deadline !== watchdogDeadline(old, latest)) this.putAttempt(latest, deadline);
        return r;
      });
    });
  }

  listDueRollouts(now: number, after: DueRollout | null, limit: number): MaybePromise<DueRollout[]> {
    return this.flushed(() =>
      then(
        after === null
          ? this.c.all(SELECT_DUE, [now, limit])
          : this.c.all(SELECT_DUE_AFTER, [now, after.deadline, after.rollout_id, limit]),
        (rows) => rows.map((r) => ({ rollout_id: r[0] as string, deadline: r[1] as number })),
      ),
    );
  }

  // Attempts ---------------------------------------------------------------------------------------

  private rememberAttempt(row: SqlRow): Attempt {
    const a = deepFreeze(attemptSpec.fromRow(row));
    const key = attemptKey(a.rollout_id, a.attempt_id);
    // A held-back version is newer than SQL's.
    const cached = this.cache.attempts.rows.get(key);
    if (cached) return cached;
    this.cache.remember(this.cache.attempts, key, a, rowBytes(row));
    return a;
  }

  private rememberLatest(rid: string, a: Attempt | null): void {
    // Known latest attempts are kept up to date by the writes; SQL may lag behind held-back ones.
    if (!this.cache.latest.has(rid)) this.cache.latest.set(rid, a);
  }

  private knownLatest(rid: string): Attempt | null | undefined {
    return this.cache.latest.get(rid) as Attempt | null | undefined;
  }

  getAttempt(rid: string, aid: string): MaybePromise<Attempt | null> {
    const known = this.cache.attempts.rows.get(attemptKey(rid, aid));
    if (known !== undefined) return known;
    const latest = this.knownLatest(rid);
    if (latest !== undefined && latest?.attempt_id === aid) return latest;
    return then(this.c.all(SELECT_ATTEMPT_AND_LATEST, [rid, aid, rid]), (rows) => {
      let found: Attempt | null = null;
      let newest: Attempt | null = null;
      for (const row of rows) {
        const a = this.rememberAttempt(row);
        if (a.attempt_id === aid) found = a;
        if (newest === null || a.sequence_id > newest.sequence_id) newest = a;
      }
      this.rememberLatest(rid, newest);
      if (found === null) this.cache.remember(this.cache.attempts, attemptKey(rid, aid), null);
      return found;
    });
  }

  getLatestAttempt(rid: string): MaybePromise<Attempt | null> {
    const known = this.knownLatest(rid);
    if (known !== undefined) return known;
    return then(this.c.get(SELECT_LATEST_ATTEMPT, [rid]), (row) => {
      const a = row === undefined ? null : this.rememberAttempt(row);
      this.rememberLatest(rid, a);
      return a;
    });
  }

  getLatestAttempts(ids: readonly string[]): MaybePromise<Map<string, Attempt>> {
    const out = new Map<string, Attempt>();
    const unknown: string[] = [];
    for (const id of ids) {
      const known = this.knownLatest(id);
      if (known === undefined) unknown.push(id);
      else if (known !== null) out.set(id, known);
    }
    if (unknown.length === 0) return out;
    return this.flushed(() =>
      then(this.c.all(SELECT_LATEST_ATTEMPTS, [JSON.stringify(unknown)]), (rows) => {
        for (const row of rows) {
          const a = attemptSpec.fromRow(row);
          out.set(a.rollout_id, a);
        }
        return out;
      }),
    );
  }

  countAttempts(rid: string): MaybePromise<number> {
    // Sequence ids count up from 1 within a rollout (the storage contract), so the latest one is the count.
    return then(this.getLatestAttempt(rid), (latest) => (latest === null ? 0 : latest.sequence_id));
  }

  /** Holds back an attempt row; `deadline`: its rollout's watchdog deadline if it is the latest attempt, else null. */
  private putAttempt(a: Attempt, deadline: number | null, isNew = false): void {
    this.cache.put(this.cache.attempts, attemptKey(a.rollout_id, a.attempt_id), a, attemptValues(a, deadline), isNew);
  }

  insertAttempt(attempt: Attempt): MaybePromise<void> {
    const a = frozen(attempt);
    const rid = a.rollout_id;
    if (this.cache.attempts.rows.get(attemptKey(rid, a.attempt_id)))
      throw new Error(`insertAttempt: attempt ${a.attempt_id} of rollout ${rid} already exists`);
    return then(this.getRollout(rid), (rollout) => {
      if (!rollout) throw new Error(`insertAttempt: rollout ${rid} does not exist`);
      return then(this.getLatestAttempt(rid), (previous) => {
        // The core numbers a new attempt after every existing one: it becomes the latest, and the
        // deadline moves over to it.
        if (previous !== null && watchdogDeadline(rollout, previous) !== null) this.putAttempt(previous, null);
        this.putAttempt(a, watchdogDeadline(rollout, a), true);
        this.cache.count("attempts", 1);
        this.cache.setLatest(rid, a);
      });
    });
  }

  updateAttempt(rid: string, aid: string, patch: AttemptPatchRow): MaybePromise<Attempt> {
    return then(this.getAttempt(rid, aid), (old) => {
      if (!old) throw new Error(`updateAttempt: attempt ${aid} of rollout ${rid} does not exist`);
      const a = patched(old, patch, ATTEMPT_FIXED_FIELDS);
      return then(this.getRollout(rid), (rollout) =>
        then(this.getLatestAttempt(rid), (latest) => {
          const isLatest = latest?.attempt_id === aid;
          this.putAttempt(a, isLatest && rollout !== null ? watchdogDeadline(rollout, a) : null);
          if (isLatest) this.cache.setLatest(rid, a);
          return a;
        }),
      );
    });
  }

  // Queue ------------------------------------------------------------------------------------------

  pushQueue(ids: readonly string[]): void {
    // Held back until the commit: newer than every queued row in SQL, so FIFO order holds.
    this.cache.enqueue(ids);
  }

  popQueue(n: number): MaybePromise<string[]> {
    if (n <= 0) return [];
    if (this.cache.head.length >= n) return this.cache.dequeue(n);
    const taken = this.cache.dequeue(this.cache.head.length);
    // The front read so far is used up: read on (after deleting what was popped, so SQL's front is
    // the queue's front), enough for this call and the next dequeues of the group.
    return then(
      this.queueFlushed(() => this.c.all(READ_QUEUE, [Math.max(n - taken.length, QUEUE_READ_AHEAD)])),
      (rows) => {
        this.cache.fillHead(rows.map((r) => [r[0] as number, r[1] as string]));
        for (const id of this.cache.dequeue(n - taken.length)) taken.push(id);
        return taken;
      },
    );
  }

  queueHas(id: string): MaybePromise<boolean> {
    if (this.cache.queued.includes(id) || this.cache.head.some((r) => r[1] === id)) return true;
    return this.queueFlushed(() =>
      then(this.c.get(`SELECT 1 FROM "queue" WHERE "rollout_id" = ? LIMIT 1`, [id]), (row) => row !== undefined),
    );
  }

  // Spans ------------------------------------------------------------------------------------------

  async insertSpans(spans: Span[]): Promise<Span[]> {
    const n = SPAN_COLUMNS.length;
    // Every span's values are built (and its JSON checked) before the first statement runs.
    const args: SqlValue[] = [];
    for (const s of spans) spanValues(s, args);
    // Duplicates are rare: each statement skips them itself (ON CONFLICT DO NOTHING, also for a repeat
    // within the statement), and only a statement that inserted fewer rows than it had needs a closer look.
    let kept: boolean[] | null = null;
    let start = 0;
    let inserted = 0;
    for (const size of chunkSizes(spans.length, Math.floor(MAX_BIND_PARAMS / n))) {
      const chunk = spans.length === size ? args : args.slice(start * n, (start + size) * n);
      const { changes, lastRowid } = await this.c.run(INSERT_SPANS(size), chunk);
      inserted += changes;
      if (changes !== size) {
        kept ??= new Array<boolean>(spans.length).fill(true);
        await this.markInserted(spans, start, size, changes, lastRowid, kept);
      }
      start += size;
    }
    if (inserted > 0) this.cache.count("spans", inserted);
    await this.raiseSequences(spans, kept);
    return kept === null ? spans : spans.filter((_, i) => kept[i]);
  }

  /**
   * The counters after an insert (see SELECT_SEQUENCE): the inserted spans carry their ids in SQL, so a
   * cached counter is only raised in the cache; the largest refused id of each rollout is written unless
   * the cache shows the counter is past it (one statement per rollout: a retried batch is all refusals).
   */
  private async raiseSequences(spans: Span[], kept: boolean[] | null): Promise<void> {
    const counters = this.cache.sequences;
    let refused: Map<string, number> | null = null;
    let rid = "";
    let known: number | null | undefined;
    for (let i = 0; i < spans.length; i++) {
      const s = spans[i]!;
      if (s.rollout_id !== rid) {
        rid = s.rollout_id;
        known = counters.rows.get(rid);
      }
      const seq = countedSequenceId(s.sequence_id);
      const inserted = kept === null || kept[i]!;
      if (known !== undefined && known !== null) {
        if (seq <= known) continue;
        if (inserted) this.cache.putWritten(counters, rid, seq);
        else this.cache.put(counters, rid, seq, [rid, seq]);
        known = seq;
      } else if (!inserted && seq > (refused?.get(rid) ?? 0)) {
        (refused ??= new Map()).set(rid, seq);
      }
    }
    if (refused !== null) for (const [r, seq] of refused) await this.c.run(CHMAX_SEQUENCE, [r, seq]);
  }

  /**
   * Which of `spans[start, start + size)` one INSERT put in, given its `changes`: its rows have the last
   * `changes` ids (ids are consecutive under the write lock; cheaper than RETURNING on every insert),
   * and of spans sharing a key only the first can be among them (the later ones hit its row).
   */
  private async markInserted(
    spans: Span[],
    start: number,
    size: number,
    changes: number,
    lastRowid: number,
    kept: boolean[],
  ): Promise<void> {
    const fresh = new Set<string>();
    if (changes > 0) {
      const rows = await this.c.all(`SELECT "rollout_id", "attempt_id", "span_id" FROM "spans" WHERE "id" > ? AND "id" <= ?`, [
        lastRowid - changes,
        lastRowid,
      ]);
      for (const r of rows) fresh.add(spanKey(r[0], r[1], r[2]));
    }
    for (let i = start; i < start + size; i++) {
      const k = spanKey(spans[i]!.rollout_id, spans[i]!.attempt_id, spans[i]!.span_id);
      kept[i] = fresh.delete(k);
    }
  }

  private sequence(rid: string): MaybePromise<number> {
    const known = this.cache.sequences.rows.get(rid);
    if (known !== undefined && known !== null) return known;
    return then(this.c.get(SELECT_SEQUENCE, [rid, rid]), (row) => {
      const v = Number(row![0]);
      this.cache.remember(this.cache.sequences, rid, v);
      return v;
    });
  }

  incSequence(rid: string, n: number): MaybePromise<number> {
    return then(this.sequence(rid), (v) => {
      this.cache.put(this.cache.sequences, rid, v + n, [rid, v + n]);
      return v + n;
    });
  }

  // Resources --------------------------------------------------------------------------------------

  getResources(id: string): MaybePromise<ResourcesUpdate | null> {
    const known = this.cache.resources.rows.get(`#${id}`);
    if (known !== undefined) return known;
    return then(this.c.get(SELECT_RESOURCES, [id]), (row) => {
      const r = row === undefined ? null : deepFreeze(resourcesSpec.fromRow(row));
      this.cache.remember(this.cache.resources, `#${id}`, r, row === undefined ? undefined : rowBytes(row));
      return r;
    });
  }

  putResources(resources: ResourcesUpdate): MaybePromise<void> {
    const r = frozen(resources);
    const values = resourcesSpec.values(r);
    const done = this.c.run(PUT_RESOURCES, values);
    return then(done, () => {
      // One row under two keys: its text is counted once.
      this.cache.putWritten(this.cache.resources, `#${r.resources_id}`, r, rowBytes(values));
      this.cache.putWritten(this.cache.resources, "", r);
    });
  }

  getLatestResources(): MaybePromise<ResourcesUpdate | null> {
    const known = this.cache.resources.rows.get("");
    if (known !== undefined) return known;
    return then(this.c.get(SELECT_LATEST_RESOURCES, []), (row) => {
      const r = row === undefined ? null : deepFreeze(resourcesSpec.fromRow(row));
      this.cache.remember(this.cache.resources, "", r, row === undefined ? undefined : rowBytes(row));
      return r;
    });
  }

  // Workers ----------------------------------------------------------------------------------------

  getWorker(id: string): MaybePromise<Worker | null> {
    const known = this.cache.workers.rows.get(id);
    if (known !== undefined) return known;
    return then(this.c.get(SELECT_WORKER, [id]), (row) => {
      const w = row === undefined ? null : deepFreeze(workerSpec.fromRow(row));
      this.cache.remember(this.cache.workers, id, w, row === undefined ? undefined : rowBytes(row));
      return w;
    });
  }

  upsertWorker(id: string, patch: WorkerPatchRow): MaybePromise<Worker> {
    return then(this.getWorker(id), (old) => {
      // A new worker starts from the model defaults (the table's column defaults are the same).
      const w = patched(old ?? newWorker(id), patch, WORKER_FIXED_FIELDS);
      this.cache.put(this.cache.workers, id, w, workerSpec.values(w));
      return w;
    });
  }

  // Queries ----------------------------------------------------------------------------------------

  query<K extends CollectionName>(collection: K, spec: QuerySpec): MaybePromise<PaginatedResult<Rows[K]>> {
    return this.flushed(() => this.queryNow(collection, spec));
  }

  private async queryNow<K extends CollectionName>(collection: K, spec: QuerySpec): Promise<PaginatedResult<Rows[K]>> {
    const table = SPECS[collection];
    const plan = planQuery(table, spec);
    if (plan === null) {
      // A filter or sort on a JSON column: narrow with SQL where possible, then the reference evaluator.
      const must = planMust(table, spec);
      const rows = await this.c.all(`${table.select} ${must.where} ${must.orderBy}`, must.args);
      return runQuery(rows.map(table.fromRow) as Rows[K][], spec);
    }
    const { limit, offset } = spec;
    const start = Math.max(0, offset);
    let items: Rows[K][] = [];
    if (limit !== 0) {
      const rows = await this.c.all(`${table.select} ${plan.where} ${plan.orderBy} LIMIT ? OFFSET ?`, [
        ...plan.args,
        limit < 0 ? -1 : limit,
        start,
      ]);
      items = rows.map(table.fromRow) as Rows[K][];
    }
    // The total is known without counting when the page is not cut short by the limit, and kept by the
    // row counters for a whole table or a status filter on rollouts (a count would read every match).
    let total: number;
    if ((limit < 0 || items.length < limit) && (items.length > 0 || start === 0)) total = start + items.length;
    else {
      const counters = countersFor(table, spec);
      total = Number(
        counters === null
          ? (await this.c.all(`SELECT COUNT(*) FROM "${table.table}" ${plan.where}`, plan.args))[0]![0]
          : (await this.c.all(SUM_COUNTERS, [JSON.stringify(counters)]))[0]![0],
      );
    }
    return { items, limit, offset, total };
  }

  counts(): MaybePromise<Record<CollectionName, number>> {
    return this.flushed(() =>
      then(this.c.all(SELECT_COUNTS), (rows) => {
        const n = new Map(rows.map((r) => [r[0] as string, Number(r[1])]));
        return Object.fromEntries(
          COLLECTIONS.map((c) => {
            // Migration 0003 writes every table's counter; a missing one is a damaged database, not a 0.
            if (!n.has(c)) throw new Error(`The row counter of ${c} is missing from row_counts`);
            return [c, n.get(c)!];
          }),
        ) as Record<CollectionName, number>;
      }),
    );
  }
}

/** See `LibsqlStorage.rowCacheUsage`. */
export interface RowCacheUsage {
  /** Estimated bytes of the rows cached now (an upper bound). */
  bytes: number;
  budgetBytes: number;
}

export interface LibsqlStorageOptions {
  /** Budget of the row cache in MiB (row-cache.ts); 0 keeps rows only within a transaction. Default 64. */
  rowCacheMiB?: number;
}

export class LibsqlStorage implements Storage {
  /** Another process (or machine) may write the same data, except for a private in-memory database. */
  readonly sharedWriters: boolean;
  /** A transaction costs far more than a row: concurrent span writes share one (see the core). */
  readonly groupCommit = true;
  private readonly cache: StoreCache;

  constructor(
    readonly driver: SqlDriver,
    options: LibsqlStorageOptions = {},
  ) {
    this.sharedWriters = driver.kind !== "memory";
    const cache = new StoreCache(driver.versioned, (options.rowCacheMiB ?? DEFAULT_ROW_CACHE_MIB) * 2 ** 20);
    this.cache = cache;
    const hooks: TxHooks = {
      begin: (c) => cache.begin(c),
      beforeCommit: (c) => {
        if (!cache.dirty) return cache.trim();
        return cache.flush(c).then(() => cache.trim());
      },
      rolledBack: () => cache.clear(),
    };
    driver.hooks = hooks;
  }

  /**
   * The row cache's estimate of the heap it keeps (row-cache.ts) and its budget. Not part of the store
   * statistics: it is this process's state, where the statistics describe the data.
   */
  rowCacheUsage(): RowCacheUsage {
    return { bytes: this.cache.bytes, budgetBytes: this.cache.budgetBytes };
  }

  tx<T>(mode: TxMode, fn: (t: StorageTx) => MaybePromise<T>): Promise<T> {
    const cache = this.cache;
    // A write's rows are checked against the budget once they are written (beforeCommit); a read's here.
    const trim = mode === "r";
    return this.driver.tx(mode, (c) => {
      cache.startMember();
      let out: MaybePromise<T>;
      try {
        out = fn(new SqlTx(c, cache));
      } catch (e) {
        cache.endMember(false);
        throw e;
      }
      if (!(out instanceof Promise)) {
        cache.endMember(true);
        if (trim) cache.trim();
        return out;
      }
      return out.then(
        (v) => {
          cache.endMember(true);
          if (trim) cache.trim();
          return v;
        },
        (e: unknown) => {
          cache.endMember(false);
          throw e;
        },
      );
    });
  }

  close(): Promise<void> {
    return this.driver.close();
  }
}
