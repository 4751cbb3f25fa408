/**
 * `Storage` (../storage.ts) over libSQL: each core transaction is one SQL transaction on a `SqlDriver`
 * (write = `BEGIN IMMEDIATE`, so two processes sharing a file serialise their writes and a dequeue can
 * never hand one rollout to two workers). Rows go in and out through the converters of tables.ts;
 * queries are pushed down into SQL by query-sql.ts.
 */
import type { Attempt, PaginatedResult, ResourcesUpdate, Rollout, Span, Worker } from "../../types/index.ts";
import { runQuery, type QuerySpec } from "../query.ts";
import type { CollectionName, Rows, Storage, StorageTx, TxMode, WorkerPatchRow } from "../storage.ts";
import type { SqlConn, SqlDriver, SqlValue } from "./driver.ts";
import { planMust, planQuery } from "./query-sql.ts";
import {
  SPECS,
  SPAN_COLUMNS,
  attemptSpec,
  attemptValues,
  resourcesSpec,
  rolloutSpec,
  rolloutValues,
  spanValues,
  toSql,
  workerSpec,
  ROLLOUT_COLUMNS,
  WORKER_COLUMNS,
} from "./tables.ts";

/**
 * Bind parameters per statement. SQLite allows 32,766 (libSQL servers too); multi-row inserts stay far
 * below it so one statement never fails on the limit, and so a few statement shapes get reused.
 */
export const MAX_BIND_PARAMS = 8000;

const placeholders = (cols: number): string => `(${new Array(cols).fill("?").join(", ")})`;
const rowsSql = (cols: number, rows: number): string => new Array(rows).fill(placeholders(cols)).join(", ");
const quoted = (cols: readonly string[]): string => cols.map((c) => `"${c}"`).join(", ");

const RETURNING_ROLLOUT = `RETURNING ${quoted(ROLLOUT_COLUMNS)}`;
/** A rollout and its latest attempt (NULL columns when it has none) in one row. */
const SELECT_ROLLOUT_WITH_LATEST =
  `SELECT ${ROLLOUT_COLUMNS.map((c) => `r."${c}"`).join(", ")}, ${attemptSpec.columns.map((c) => `a."${c}"`).join(", ")} ` +
  `FROM "rollouts" AS r LEFT JOIN "attempts" AS a ON a."rollout_id" = r."rollout_id" ` +
  `AND a."sequence_id" = (SELECT MAX(b."sequence_id") FROM "attempts" AS b WHERE b."rollout_id" = r."rollout_id") ` +
  `WHERE r."rollout_id" = ?`;
const RETURNING_ATTEMPT = `RETURNING ${quoted(attemptSpec.columns)}`;
const RETURNING_WORKER = `RETURNING ${quoted(WORKER_COLUMNS)}`;
const INSERT_SPANS_HEAD = `INSERT INTO "spans" (${quoted(SPAN_COLUMNS)}) VALUES `;
const INSERT_SPANS_TAIL = ` ON CONFLICT ("rollout_id", "attempt_id", "span_id") DO NOTHING`;

const spanKey = (rid: unknown, aid: unknown, sid: unknown): string => `${rid as string}\u0000${aid as string}\u0000${sid as string}`;

/** Splits `items` into chunks of at most `perChunk`, calling `fn` for each; returns nothing. */
async function chunked<T>(items: readonly T[], perChunk: number, fn: (chunk: readonly T[]) => Promise<void>): Promise<void> {
  for (let i = 0; i < items.length; i += perChunk) await fn(items.length <= perChunk ? items : items.slice(i, i + perChunk));
}

/**
 * One core transaction. It remembers the rollouts and attempts it has read or written (it holds the
 * write lock or a read snapshot, so they cannot change under it), which saves the core's repeated reads
 * of the same rows within one operation. The memory dies with the transaction: nothing is cached across
 * transactions, so other processes' writes are always seen.
 */
export class SqlTx implements StorageTx {
  private readonly rollouts = new Map<string, Rollout | null>();
  /** Latest attempt per rollout id, where known. */
  private readonly latest = new Map<string, Attempt | null>();

  constructor(private readonly c: SqlConn) {}

  private async one<T>(spec: { fromRow(r: ArrayLike<SqlValue>): T }, sql: string, args: SqlValue[]): Promise<T | null> {
    const row = await this.c.get(sql, args);
    return row === undefined ? null : spec.fromRow(row);
  }

  // Rollouts ---------------------------------------------------------------------------------------

  async getRollout(id: string): Promise<Rollout | null> {
    const known = this.rollouts.get(id);
    if (known !== undefined) return known;
    // The latest attempt comes along: the core nearly always reads it right after the rollout.
    const row = await this.c.get(SELECT_ROLLOUT_WITH_LATEST, [id]);
    if (row === undefined) {
      this.rollouts.set(id, null);
      return null;
    }
    const r = rolloutSpec.fromRow(row);
    this.rollouts.set(id, r);
    const attempt = Array.prototype.slice.call(row, ROLLOUT_COLUMNS.length) as SqlValue[];
    this.latest.set(id, attempt[0] === null ? null : attemptSpec.fromRow(attempt));
    return r;
  }

  async insertRollouts(rows: Rollout[]): Promise<void> {
    const n = ROLLOUT_COLUMNS.length;
    await chunked(rows, Math.floor(MAX_BIND_PARAMS / n), async (chunk) => {
      const args: SqlValue[] = [];
      for (const r of chunk) args.push(...rolloutValues(r));
      await this.c.run(`INSERT INTO "rollouts" (${quoted(ROLLOUT_COLUMNS)}) VALUES ${rowsSql(n, chunk.length)}`, args);
    });
    if (rows.length <= 64) for (const r of rows) this.rollouts.set(r.rollout_id, r);
  }

  async updateRollout(id: string, patch: Partial<Rollout>): Promise<Rollout> {
    const keys = Object.keys(patch).filter((k) => k !== "rollout_id" && (patch as Record<string, unknown>)[k] !== undefined);
    if (keys.length === 0) {
      const r = await this.getRollout(id);
      if (!r) throw new Error(`updateRollout: rollout ${id} does not exist`);
      return r;
    }
    const args = keys.map((k) => toSql(k, (patch as Record<string, unknown>)[k]));
    args.push(id);
    const row = await this.c.get(`UPDATE "rollouts" SET ${keys.map((k) => `"${k}" = ?`).join(", ")} WHERE "rollout_id" = ? ${RETURNING_ROLLOUT}`, args);
    if (row === undefined) throw new Error(`updateRollout: rollout ${id} does not exist`);
    const r = rolloutSpec.fromRow(row);
    this.rollouts.set(id, r);
    return r;
  }

  async listRunningRollouts(): Promise<Rollout[]> {
    const rows = await this.c.all(`${rolloutSpec.select} WHERE "status" IN ('preparing', 'running') ORDER BY rowid`);
    return rows.map(rolloutSpec.fromRow);
  }

  // Attempts ---------------------------------------------------------------------------------------

  async getAttempt(rid: string, aid: string): Promise<Attempt | null> {
    const latest = this.latest.get(rid);
    if (latest !== undefined && latest?.attempt_id === aid) return latest;
    // The requested attempt and the rollout's latest in one query: the core usually asks for both.
    const rows = await this.c.all(
      `${attemptSpec.select} WHERE "rollout_id" = ? AND ("attempt_id" = ? OR "sequence_id" = (SELECT MAX("sequence_id") FROM "attempts" WHERE "rollout_id" = ?))`,
      [rid, aid, rid],
    );
    let found: Attempt | null = null;
    let newest: Attempt | null = null;
    for (const r of rows) {
      const a = attemptSpec.fromRow(r);
      if (a.attempt_id === aid) found = a;
      if (newest === null || a.sequence_id > newest.sequence_id) newest = a;
    }
    this.latest.set(rid, newest);
    return found;
  }

  async getLatestAttempt(rid: string): Promise<Attempt | null> {
    const known = this.latest.get(rid);
    if (known !== undefined) return known;
    const a = await this.one(attemptSpec, `${attemptSpec.select} WHERE "rollout_id" = ? ORDER BY "sequence_id" DESC LIMIT 1`, [rid]);
    this.latest.set(rid, a);
    return a;
  }

  async getLatestAttempts(ids: readonly string[]): Promise<Map<string, Attempt>> {
    const out = new Map<string, Attempt>();
    if (ids.length === 0) return out;
    // One JSON parameter whatever the number of ids; the index on (rollout_id, sequence_id) finds each max.
    const rows = await this.c.all(
      `${attemptSpec.select} AS a WHERE "rollout_id" IN (SELECT value FROM json_each(?)) ` +
        `AND "sequence_id" = (SELECT MAX(b."sequence_id") FROM "attempts" AS b WHERE b."rollout_id" = a."rollout_id")`,
      [JSON.stringify(ids)],
    );
    for (const r of rows) {
      const a = attemptSpec.fromRow(r);
      out.set(a.rollout_id, a);
    }
    return out;
  }

  async countAttempts(rid: string): Promise<number> {
    // Sequence ids count up from 1 within a rollout (the storage contract), so the latest one is the count.
    const latest = this.latest.get(rid);
    if (latest !== undefined) return latest === null ? 0 : latest.sequence_id;
    return Number((await this.c.get(`SELECT COUNT(*) FROM "attempts" WHERE "rollout_id" = ?`, [rid]))![0]);
  }

  async insertAttempt(a: Attempt): Promise<void> {
    await this.c.run(`INSERT INTO "attempts" (${quoted(attemptSpec.columns)}) VALUES ${placeholders(attemptSpec.columns.length)}`, attemptValues(a));
    const known = this.latest.get(a.rollout_id);
    if (known === null || (known !== undefined && known.sequence_id < a.sequence_id)) this.latest.set(a.rollout_id, a);
    else if (known !== undefined) this.latest.delete(a.rollout_id);
  }

  async updateAttempt(rid: string, aid: string, patch: Partial<Attempt>): Promise<Attempt> {
    const keys = Object.keys(patch).filter((k) => k !== "rollout_id" && k !== "attempt_id" && (patch as Record<string, unknown>)[k] !== undefined);
    if (keys.length === 0) {
      const a = await this.getAttempt(rid, aid);
      if (!a) throw new Error(`updateAttempt: attempt ${aid} of rollout ${rid} does not exist`);
      return a;
    }
    const args = keys.map((k) => toSql(k, (patch as Record<string, unknown>)[k]));
    args.push(rid, aid);
    const row = await this.c.get(
      `UPDATE "attempts" SET ${keys.map((k) => `"${k}" = ?`).join(", ")} WHERE "rollout_id" = ? AND "attempt_id" = ? ${RETURNING_ATTEMPT}`,
      args,
    );
    if (row === undefined) throw new Error(`updateAttempt: attempt ${aid} of rollout ${rid} does not exist`);
    const a = attemptSpec.fromRow(row);
    if (this.latest.get(rid)?.attempt_id === aid) this.latest.set(rid, a);
    return a;
  }

  // Queue ------------------------------------------------------------------------------------------

  async pushQueue(ids: readonly string[]): Promise<void> {
    if (ids.length === 0) return;
    if (ids.length === 1) await this.c.run(`INSERT INTO "queue" ("rollout_id") VALUES (?)`, [ids[0]!]);
    else await this.c.run(`INSERT INTO "queue" ("rollout_id") SELECT value FROM json_each(?) ORDER BY key`, [JSON.stringify(ids)]);
  }

  async popQueue(n: number): Promise<string[]> {
    if (n <= 0) return [];
    const rows = await this.c.all(`DELETE FROM "queue" WHERE "id" IN (SELECT "id" FROM "queue" ORDER BY "id" LIMIT ?) RETURNING "id", "rollout_id"`, [n]);
    // RETURNING has no guaranteed order: restore FIFO order by id.
    if (rows.length > 1) rows.sort((a, b) => (a[0] as number) - (b[0] as number));
    return rows.map((r) => r[1] as string);
  }

  async queueHas(id: string): Promise<boolean> {
    return (await this.c.get(`SELECT 1 FROM "queue" WHERE "rollout_id" = ? LIMIT 1`, [id])) !== undefined;
  }

  // Spans ------------------------------------------------------------------------------------------

  async insertSpans(spans: Span[]): Promise<Span[]> {
    // A duplicate later in the same batch is skipped, as if the batch were inserted one by one.
    const seen = new Set<string>();
    const fresh: Span[] = [];
    for (const s of spans) {
      const k = spanKey(s.rollout_id, s.attempt_id, s.span_id);
      if (seen.has(k)) continue;
      seen.add(k);
      fresh.push(s);
    }
    const inserted = new Set<string>();
    const whole: (readonly Span[])[] = [];
    let all = true;
    const n = SPAN_COLUMNS.length;
    await chunked(fresh, Math.floor(MAX_BIND_PARAMS / n), async (chunk) => {
      const args: SqlValue[] = [];
      for (const s of chunk) spanValues(s, args);
      const { changes, lastRowid } = await this.c.run(INSERT_SPANS_HEAD + rowsSql(n, chunk.length) + INSERT_SPANS_TAIL, args);
      if (changes === chunk.length) {
        whole.push(chunk);
        return;
      }
      // Some were duplicates: the rows this statement inserted are the last `changes` ids (ids are
      // consecutive under the write lock). Cheaper than RETURNING on every insert.
      all = false;
      if (changes === 0) return;
      const rows = await this.c.all(`SELECT "rollout_id", "attempt_id", "span_id" FROM "spans" WHERE "id" > ? AND "id" <= ?`, [lastRowid - changes, lastRowid]);
      for (const r of rows) inserted.add(spanKey(r[0], r[1], r[2]));
    });
    if (all) return fresh;
    for (const chunk of whole) for (const s of chunk) inserted.add(spanKey(s.rollout_id, s.attempt_id, s.span_id));
    return fresh.filter((s) => inserted.has(spanKey(s.rollout_id, s.attempt_id, s.span_id)));
  }

  async incSequence(rid: string, n: number): Promise<number> {
    const row = await this.c.get(
      `INSERT INTO "span_sequences" ("rollout_id", "value") VALUES (?, ?) ON CONFLICT ("rollout_id") DO UPDATE SET "value" = "value" + excluded."value" RETURNING "value"`,
      [rid, n],
    );
    return Number(row![0]);
  }

  async chmaxSequence(rid: string, value: number): Promise<number> {
    const row = await this.c.get(
      `INSERT INTO "span_sequences" ("rollout_id", "value") VALUES (?, MAX(?, 0)) ON CONFLICT ("rollout_id") DO UPDATE SET "value" = MAX("value", excluded."value") RETURNING "value"`,
      [rid, value],
    );
    return Number(row![0]);
  }

  // Resources --------------------------------------------------------------------------------------

  getResources(id: string): Promise<ResourcesUpdate | null> {
    return this.one(resourcesSpec, `${resourcesSpec.select} WHERE "resources_id" = ?`, [id]);
  }

  async putResources(r: ResourcesUpdate): Promise<void> {
    // An upsert (not INSERT OR REPLACE) keeps the row's rowid, i.e. its place in insertion order.
    await this.c.run(
      `INSERT INTO "resources" ("resources_id", "create_time", "update_time", "version", "resources", "write_order") ` +
        `VALUES (?, ?, ?, ?, ?, (SELECT COALESCE(MAX("write_order"), 0) + 1 FROM "resources")) ` +
        `ON CONFLICT ("resources_id") DO UPDATE SET "create_time" = excluded."create_time", "update_time" = excluded."update_time", ` +
        `"version" = excluded."version", "resources" = excluded."resources", "write_order" = excluded."write_order"`,
      [r.resources_id, r.create_time, r.update_time, r.version, toSql("resources", r.resources)],
    );
  }

  getLatestResources(): Promise<ResourcesUpdate | null> {
    return this.one(resourcesSpec, `${resourcesSpec.select} ORDER BY "write_order" DESC, "update_time" DESC LIMIT 1`, []);
  }

  // Workers ----------------------------------------------------------------------------------------

  getWorker(id: string): Promise<Worker | null> {
    return this.one(workerSpec, `${workerSpec.select} WHERE "worker_id" = ?`, [id]);
  }

  async upsertWorker(id: string, patch: WorkerPatchRow): Promise<Worker> {
    const keys = Object.keys(patch).filter((k) => k !== "worker_id" && (patch as Record<string, unknown>)[k] !== undefined);
    const args: SqlValue[] = [id, ...keys.map((k) => toSql(k, (patch as Record<string, unknown>)[k]))];
    const cols = quoted(["worker_id", ...keys]);
    // Column defaults are the model defaults (status 'unknown', the rest NULL): a new worker gets them.
    const onConflict = keys.length > 0 ? `DO UPDATE SET ${keys.map((k) => `"${k}" = excluded."${k}"`).join(", ")}` : `DO UPDATE SET "worker_id" = "worker_id"`;
    const row = await this.c.get(`INSERT INTO "workers" (${cols}) VALUES ${placeholders(keys.length + 1)} ON CONFLICT ("worker_id") ${onConflict} ${RETURNING_WORKER}`, args);
    return workerSpec.fromRow(row!);
  }

  // Queries ----------------------------------------------------------------------------------------

  async query<K extends CollectionName>(collection: K, spec: QuerySpec): Promise<PaginatedResult<Rows[K]>> {
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
      const rows = await this.c.all(`${table.select} ${plan.where} ${plan.orderBy} LIMIT ? OFFSET ?`, [...plan.args, limit < 0 ? -1 : limit, start]);
      items = rows.map(table.fromRow) as Rows[K][];
    }
    // The total is known without counting when the page is not cut short by the limit.
    let total: number;
    if ((limit < 0 || items.length < limit) && (items.length > 0 || start === 0)) total = start + items.length;
    else total = Number((await this.c.all(`SELECT COUNT(*) FROM "${table.table}" ${plan.where}`, plan.args))[0]![0]);
    return { items, limit, offset, total };
  }

  async counts(): Promise<Record<CollectionName, number>> {
    const r = (
      await this.c.all(
        `SELECT (SELECT COUNT(*) FROM "rollouts"), (SELECT COUNT(*) FROM "attempts"), (SELECT COUNT(*) FROM "spans"), ` +
          `(SELECT COUNT(*) FROM "resources"), (SELECT COUNT(*) FROM "workers")`,
      )
    )[0]!;
    return { rollouts: Number(r[0]), attempts: Number(r[1]), spans: Number(r[2]), resources: Number(r[3]), workers: Number(r[4]) };
  }
}

export class LibsqlStorage implements Storage {
  /** Another process (or machine) may write the same data, except for a private in-memory database. */
  readonly sharedWriters: boolean;
  /** A transaction costs far more than a row: concurrent span writes share one (see the core). */
  readonly groupCommit = true;

  constructor(readonly driver: SqlDriver) {
    this.sharedWriters = driver.kind !== "memory";
  }

  tx<T>(mode: TxMode, fn: (t: StorageTx) => Promise<T>): Promise<T> {
    return this.driver.tx(mode, (c) => fn(new SqlTx(c)));
  }

  close(): Promise<void> {
    return this.driver.close();
  }
}
