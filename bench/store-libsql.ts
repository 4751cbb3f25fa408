/**
 * LibsqlLightningStore throughput on a file database (WAL, synchronous=NORMAL), with the
 * InMemoryLightningStore measured in the same run as the baseline:
 * - spans/s through addManySpans (batches of 1,000): all in one attempt, and spread over attempts of 13
 *   spans each (the training shape: the random span ids of one huge attempt make the unique index's
 *   inserts scatter, which costs SQLite about half its speed);
 * - spans/s through many concurrent addSpan calls (group commit coalesces them);
 * - full rollout lifecycles/s (enqueue, dequeue, 4 spans via addSpan, updateAttempt succeeded), one
 *   lifecycle at a time and with 32 concurrent workers;
 * - pages/s of `querySpans` (100 spans, from the middle of a 50,000-span rollout, with its total).
 * Targets (issue): >= 50,000 spans/s batched and >= 5,000 lifecycles/s on a file database.
 * The last line is the engine floor: the same span rows, already encoded, inserted by the libsql binding
 * alone into the store's schema (one 1,000-row batch per transaction, as addManySpans does, checkpoints
 * on a background thread as the store runs them) - the most
 * any store code on top of SQLite could reach on this machine with this schema. The line after it is the
 * same for lifecycles: every statement a 32-worker run executed, with its arguments, replayed in order
 * through the binding alone (statements back to back keep SQLite's data hot in the CPU caches, so it is
 * an upper bound on what a store with free JavaScript would reach); and the converse, the same run with
 * every statement a stub (the store's JavaScript alone).
 * Each line is measured ROUNDS times (BENCH_ROUNDS, default 3), the file and in-memory stores taking turns
 * after one warm-up, and prints the best wall-clock rate with the range of all rounds: this machine's speed
 * drifts by 30-40 % over minutes (the engine floor moves with it), so one run mostly says when it ran.
 * Each best figure comes with its CPU-time rate (items per second of this process's CPU time): on a shared,
 * overloaded machine the wall-clock rate mostly measures the other tenants; the CPU-time rate is what
 * one idle core would give. The load average is printed at the end.
 * The lifecycle target is a throughput, checked on the 32-worker line; one lifecycle at a time waits for
 * its 7 commits one after another, so that line measures commit latency and has no target.
 *
 * Run: `npx tsx bench/store-libsql.ts` (or `npm run bench -- store-libsql`). BENCH_N scales the counts.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { availableParallelism, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { DEFAULT_CACHE_SIZE_MIB, InMemoryLightningStore, LibsqlLightningStore, type LightningStore } from "../src/store/index.ts";
import type { AttemptedRollout } from "../src/types/index.ts";
import type { SqlValue } from "../src/store/libsql/driver.ts";
import { MAX_BIND_PARAMS, chunkSizes, quoted, rowsSql } from "../src/store/libsql/sql.ts";
import { SPAN_COLUMNS, spanValues } from "../src/store/libsql/tables.ts";
import { BackgroundCheckpointer, SAFETY_NET_PAGES } from "../src/store/libsql/checkpointer.ts";
import { makeLlmSpan } from "./_llm-span.ts";

const TARGET_BATCHED_SPANS = 50_000;
const TARGET_LIFECYCLES = 5_000;
const N = Number(process.env.BENCH_N ?? 20_000);
const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 3));

/** A rate by wall clock, and by the CPU time this process used (the rate an otherwise idle core would give). */
interface Rate {
  wall: number;
  cpu: number;
}

/** Times `fn` (which handles `n` items) by wall clock and by process CPU time. */
async function rate(n: number, fn: () => Promise<void>): Promise<Rate> {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await fn();
  const wallMs = performance.now() - t0;
  const c = process.cpuUsage(c0);
  return { wall: (n / wallMs) * 1000, cpu: (n / ((c.user + c.system) / 1000)) * 1000 };
}

async function batchedSpans(store: LightningStore, n: number): Promise<Rate> {
  const ar = await store.startRollout({ q: 1 });
  const spans = Array.from({ length: n }, (_, i) => makeLlmSpan(ar.rollout_id, ar.attempt.attempt_id, i + 1));
  return rate(n, async () => {
    for (let i = 0; i < n; i += 1000) await store.addManySpans(spans.slice(i, i + 1000));
  });
}

/**
 * The training shape: batches of 1,000 spans that belong to many attempts of 13 spans each (what a
 * server's group commit sees from many runners), instead of one attempt holding every span. Each span's
 * key (rollout, attempt, random span id) then lands in a small region of the unique index, as in a real
 * run; in `batchedSpans` the random span ids of one 100k-span attempt scatter over one huge region.
 */
async function batchedSpansManyRollouts(store: LightningStore, n: number): Promise<Rate> {
  const perRollout = 13;
  const rollouts = Math.ceil(n / perRollout);
  await store.enqueueManyRollouts(Array.from({ length: rollouts }, (_, i) => ({ input: { i } })));
  const claimed: AttemptedRollout[] = [];
  while (claimed.length < rollouts) claimed.push(...(await store.dequeueManyRollouts({ limit: 1000, worker_id: "w" })));
  const spans = Array.from({ length: n }, (_, i) => {
    const ar = claimed[Math.floor(i / perRollout)]!;
    return makeLlmSpan(ar.rollout_id, ar.attempt.attempt_id, (i % perRollout) + 1);
  });
  return rate(n, async () => {
    for (let i = 0; i < n; i += 1000) await store.addManySpans(spans.slice(i, i + 1000));
  });
}

async function concurrentAddSpan(store: LightningStore, n: number, callers: number): Promise<Rate> {
  const ar = await store.startRollout({ q: 1 });
  const spans = Array.from({ length: n }, (_, i) => makeLlmSpan(ar.rollout_id, ar.attempt.attempt_id, i + 1));
  let next = 0;
  return rate(n, async () => {
    await Promise.all(
      Array.from({ length: callers }, async () => {
        while (next < n) await store.addSpan(spans[next++]!);
      }),
    );
  });
}

async function lifecycles(store: LightningStore, n: number, workers: number): Promise<Rate> {
  const one = async (i: number, w: string) => {
    await store.enqueueRollout({ question: "What is 2 + 2?", i });
    const ar = await store.dequeueRollout({ worker_id: w });
    if (!ar) return; // another worker took ours; it runs that one
    for (let k = 1; k <= 4; k++) await store.addSpan(makeLlmSpan(ar.rollout_id, ar.attempt.attempt_id, k));
    await store.updateAttempt(ar.rollout_id, ar.attempt.attempt_id, { status: "succeeded" });
  };
  let next = 0;
  return rate(n, async () => {
    await Promise.all(
      Array.from({ length: workers }, async (_, w) => {
        while (next < n) await one(next++, `w${w}`);
      }),
    );
  });
}

/**
 * Reads: pages of 100 spans at the middle of one rollout holding `n` spans (a trainer or dashboard paging
 * through a long trace). Each page also counts the rollout's spans for `total`.
 */
async function spanPages(store: LightningStore, n: number): Promise<Rate> {
  const ar = await store.startRollout({ q: 1 });
  for (let i = 0; i < n; i += 1000) {
    await store.addManySpans(
      Array.from({ length: Math.min(1000, n - i) }, (_, k) => makeLlmSpan(ar.rollout_id, ar.attempt.attempt_id, i + k + 1)),
    );
  }
  const pages = 200;
  return rate(pages, async () => {
    for (let p = 0; p < pages; p++) await store.querySpans(ar.rollout_id, { limit: 100, offset: Math.floor(n / 2) + (p % 10) * 100 });
  });
}

interface RawStatement {
  reader: boolean;
  raw(on: boolean): RawStatement;
  run(args: unknown[]): unknown;
  get(args: unknown[]): unknown;
  all(args: unknown[]): unknown;
}
interface RawDatabase {
  exec(sql: string): void;
  prepare(sql: string): RawStatement;
}
type RawDatabaseClass = (new (p: string) => RawDatabase) & { prototype: RawDatabase };

/**
 * The `libsql` binding alone on a fresh database that the store created, with the store's connection
 * settings and its background checkpoints; `fn` runs against it and is timed for `n` items.
 */
async function rawBinding(path: string, n: number, fn: (db: RawDatabase, committed: () => void) => void): Promise<Rate> {
  await (await LibsqlLightningStore.open(`file:${path}`)).close();
  const { default: Database } = (await import("libsql")) as unknown as { default: RawDatabaseClass };
  const db = new Database(path);
  db.exec("PRAGMA synchronous = NORMAL");
  db.exec(`PRAGMA cache_size = -${DEFAULT_CACHE_SIZE_MIB * 1024}`);
  const checkpointer = await BackgroundCheckpointer.start(path, { onError: (e) => console.error(e) });
  if (checkpointer) db.exec(`PRAGMA wal_autocheckpoint = ${SAFETY_NET_PAGES}`);
  const r = await rate(n, async () => fn(db, () => checkpointer?.committed()));
  await checkpointer?.stop();
  return r;
}

/** Pre-encoded span rows through the native binding alone, into a database the store created. */
async function engineFloor(path: string, n: number): Promise<Rate> {
  const cols = SPAN_COLUMNS.length;
  const per = Math.floor(MAX_BIND_PARAMS / cols);
  const batches: SqlValue[][][] = [];
  for (let i = 0; i < n; i += 1000) {
    const values: SqlValue[] = [];
    for (let k = i; k < Math.min(n, i + 1000); k++) spanValues(makeLlmSpan("ro-000000000001", "at-00000001", k + 1), values);
    const chunks: SqlValue[][] = [];
    let at = 0;
    for (const size of chunkSizes(values.length / cols, per)) {
      chunks.push(values.slice(at * cols, (at + size) * cols));
      at += size;
    }
    batches.push(chunks);
  }
  return rawBinding(path, n, (db, committed) => {
    const statements = new Map<number, RawStatement>();
    for (const chunks of batches) {
      db.exec("BEGIN IMMEDIATE");
      for (const args of chunks) {
        const rows = args.length / cols;
        let st = statements.get(rows);
        if (st === undefined) {
          st = db.prepare(`INSERT INTO "spans" (${quoted(SPAN_COLUMNS)}) VALUES ${rowsSql(cols, rows)} ON CONFLICT DO NOTHING`);
          statements.set(rows, st);
        }
        st.run(args);
      }
      db.exec("COMMIT");
      committed();
    }
  });
}

/**
 * Runs `body` while every statement the `libsql` binding prepares is handed to `onPrepare` first (to wrap
 * its methods); the binding is left as it was afterwards.
 */
async function withPrepareHook<T>(onPrepare: (sql: string, st: RawStatement) => void, body: () => Promise<T>): Promise<T> {
  const { default: Database } = (await import("libsql")) as unknown as { default: RawDatabaseClass };
  const prepare = Database.prototype.prepare;
  Database.prototype.prepare = function (this: RawDatabase, sql: string) {
    const st = prepare.call(this, sql);
    onPrepare(sql, st);
    return st;
  };
  try {
    return await body();
  } finally {
    Database.prototype.prepare = prepare;
  }
}

/**
 * The SQL of `lifecycles(n, workers)` alone: every statement a file store executed in that run (each with
 * its arguments, recorded by wrapping the binding's prepared statements), replayed in order through the
 * binding on a fresh database. What the lifecycle line would reach if the store's JavaScript cost nothing.
 */
async function lifecycleSqlFloor(dir: string, n: number, workers: number): Promise<Rate> {
  const calls: [sql: string, method: "run" | "get" | "all", args: unknown[]][] = [];
  let recording = false;
  const record = (sql: string, st: RawStatement) => {
    for (const m of ["run", "get", "all"] as const) {
      const f = st[m];
      st[m] = (args: unknown[] = []) => {
        if (recording) calls.push([sql, m, [...args]]);
        return f.call(st, args);
      };
    }
  };
  await withPrepareHook(record, async () => {
    const store = await LibsqlLightningStore.open(`file:${join(dir, "recorded.db")}`);
    recording = true;
    await lifecycles(store, n, workers);
    recording = false;
    await store.close();
  });
  return rawBinding(join(dir, "replayed.db"), n, (db, committed) => {
    const statements = new Map<string, RawStatement>();
    for (const [sql, m, args] of calls) {
      let st = statements.get(sql);
      if (st === undefined) {
        st = db.prepare(sql);
        if (st.reader) st.raw(true);
        statements.set(sql, st);
      }
      st[m](args);
      if (sql === "COMMIT") committed();
    }
  });
}

/**
 * The other half of the lifecycle line: the same 32-worker run on a file store whose statements, once it
 * is open, do nothing and answer as SQLite would for this workload (row counts, the queue kept in a
 * list, no rows read back). What the lifecycle line would reach if SQLite cost nothing: the store's own
 * JavaScript, with the core's logic the in-memory store also runs.
 */
async function lifecycleJsAlone(dir: string, n: number, workers: number): Promise<Rate> {
  let stubbed = false;
  const queue: [number, string][] = [];
  let queueIds = 0;
  const stub = (sql: string, st: RawStatement) => {
    const { run, get, all } = st;
    const cols = /^INSERT INTO "\w+" \(([^)]*)\)/.exec(sql)?.[1]?.split(",").length ?? 1;
    st.run = (args: unknown[] = []) => {
      if (!stubbed) return run.call(st, args);
      if (sql.startsWith('INSERT INTO "queue"')) for (const id of args) queue.push([++queueIds, id as string]);
      if (sql.startsWith('DELETE FROM "queue"')) {
        const gone = new Set(args);
        for (let i = queue.length - 1; i >= 0; i--) if (gone.has(queue[i]![0])) queue.splice(i, 1);
      }
      return { changes: Math.max(1, Math.floor(args.length / cols)), lastInsertRowid: 0 };
    };
    st.get = (args: unknown[] = []) => (!stubbed ? get.call(st, args) : sql.startsWith("PRAGMA data_version") ? [1] : undefined);
    st.all = (args: unknown[] = []) =>
      !stubbed ? all.call(st, args) : sql.startsWith('SELECT "id", "rollout_id" FROM "queue"') ? queue.slice(0, args[0] as number) : [];
  };
  return withPrepareHook(stub, async () => {
    const store = await LibsqlLightningStore.open(`file:${join(dir, "stubbed.db")}`);
    stubbed = true;
    await lifecycles(store, Math.ceil(n / 10), workers);
    const r = await lifecycles(store, n, workers);
    stubbed = false;
    await store.close();
    return r;
  });
}

/** The round with the best wall-clock rate. */
const best = (rates: readonly Rate[]): Rate => rates.reduce((a, b) => (b.wall > a.wall ? b : a));
const fmt = (v: number) => Math.round(v).toLocaleString("en-US").padStart(8);
/** "best unit (cpu-time rate; range of the rounds)". */
function rates(rs: readonly Rate[], unit = ""): string {
  const b = best(rs);
  const lo = Math.min(...rs.map((r) => r.wall));
  const range = rs.length > 1 ? `; rounds ${Math.round(lo).toLocaleString("en-US")}-${Math.round(b.wall).toLocaleString("en-US")}` : "";
  return `${fmt(b.wall)}${unit ? ` ${unit}` : ""} (cpu-time rate ${fmt(b.cpu)}${range})`;
}

function row(name: string, sql: readonly Rate[], mem: readonly Rate[], unit: string, target?: number): void {
  const t = target === undefined ? "" : `  target ${target.toLocaleString("en-US")}: ${best(sql).wall >= target ? "met" : "NOT met"}`;
  console.log(
    `${name.padEnd(26)} libsql file ${rates(sql, unit)}   in-memory ${rates(mem)}   ratio ${(best(sql).wall / best(mem).wall).toFixed(2)}${t}`,
  );
}

/** A line of the libsql file store alone (the floors). */
function floorRow(name: string, rs: readonly Rate[], unit: string, what: string): void {
  console.log(`${name.padEnd(26)} libsql file ${rates(rs, unit)}   ${what}`);
}

/** `ROUNDS` runs of `fn`. */
async function rounds(fn: () => Promise<Rate>): Promise<Rate[]> {
  const out: Rate[] = [];
  for (let i = 0; i < ROUNDS; i++) out.push(await fn());
  return out;
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "bench-libsql-"));
  let files = 0;
  const fileStore = () => LibsqlLightningStore.open(`file:${join(dir, `b${files++}.db`)}`);
  /**
   * Runs `fn` on a fresh file store and a fresh in-memory store, after a warm-up run of a tenth the size,
   * `ROUNDS` times with the two taking turns (each round on new stores).
   */
  const measure = async (fn: (s: LightningStore, n: number) => Promise<Rate>, n: number): Promise<[Rate[], Rate[]]> => {
    for (const s of [await fileStore(), new InMemoryLightningStore()]) {
      await fn(s, Math.ceil(n / 10));
      await s.close();
    }
    const sqlRates: Rate[] = [];
    const memRates: Rate[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const sql = await fileStore();
      sqlRates.push(await fn(sql, n));
      await sql.close();
      const mem = new InMemoryLightningStore();
      memRates.push(await fn(mem, n));
      await mem.close();
    }
    return [sqlRates, memRates];
  };
  try {
    const [bs, bm] = await measure(batchedSpans, N * 5);
    row("addManySpans (x1000)", bs, bm, "spans/s", TARGET_BATCHED_SPANS);
    const [bms, bmm] = await measure(batchedSpansManyRollouts, N * 5);
    row("addManySpans, 13/rollout", bms, bmm, "spans/s", TARGET_BATCHED_SPANS);
    const [cs, cm] = await measure((s, n) => concurrentAddSpan(s, n, 256), N);
    row("addSpan, 256 concurrent", cs, cm, "spans/s");
    const [ls, lm] = await measure((s, n) => lifecycles(s, n, 1), Math.max(500, N / 4));
    row("lifecycle, sequential", ls, lm, "lifecycles/s");
    const [lcs, lcm] = await measure((s, n) => lifecycles(s, n, 32), Math.max(500, N / 4));
    row("lifecycle, 32 workers", lcs, lcm, "lifecycles/s", TARGET_LIFECYCLES);
    const [ps, pm] = await measure(spanPages, N * 2.5);
    row("querySpans, 100-span page", ps, pm, "pages/s");
    let runs = 0;
    const floor = await rounds(() => engineFloor(join(dir, `floor${runs++}.db`), N * 5));
    floorRow("engine floor (binding)", floor, "spans/s", "pre-encoded rows, no store code");
    const lcFloor = await rounds(() => lifecycleSqlFloor(mkdtempSync(join(dir, "sql-")), Math.max(500, N / 4), 32));
    floorRow("lifecycle SQL alone", lcFloor, "lifecycles/s", "the statements of a 32-worker run, replayed through the binding");
    const lcJs = await rounds(() => lifecycleJsAlone(mkdtempSync(join(dir, "js-")), Math.max(500, N / 4), 32));
    floorRow("lifecycle JS alone", lcJs, "lifecycles/s", "the same run with every statement a stub");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  console.log(
    `load average ${loadavg()
      .map((l) => l.toFixed(1))
      .join(", ")} on ${availableParallelism()} CPUs`,
  );
}

await main();
