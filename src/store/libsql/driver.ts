/**
 * The one module that knows how SQL reaches libSQL. Everything above it sees a `SqlDriver`: serialised
 * transactions whose statements return rows as positional arrays.
 *
 * Two drivers, chosen by the URL:
 * - Embedded (`file:` and `:memory:`): the native `libsql` binding, the same engine `@libsql/client`
 *   uses for local files, driven directly on ONE connection. Measured on the 2-core dev box:
 *   `@libsql/client` spends ~75-110 us per statement (it re-prepares every statement and builds
 *   each row with defineProperty), the binding with cached prepared statements ~15-30 us. It also lets us
 *   run `BEGIN IMMEDIATE` ourselves: the client's pool rolls back a connection that comes back
 *   mid-transaction, so only `client.transaction()` could, and that costs a pool round trip per transaction.
 * - Remote (`libsql://`, `http(s)://`, `ws(s)://`): `@libsql/client`'s web build (HTTP/WebSocket only,
 *   no native code), one `client.transaction()` per store transaction. The same client (node build)
 *   can also serve `file:` URLs (option `driver: "client"`), which the tests use to exercise this path.
 *
 * Importing the native binding lazily keeps the remote path free of native code (and lets Deno/Bun
 * load the binding through their Node-API support only when a file database is opened).
 */
import { ValidationError } from "../../types/index.ts";
import { AsyncMutex } from "../mutex.ts";
import { nextTurn } from "../next-turn.ts";
import type { BackgroundCheckpointer } from "./checkpointer.ts";
import type { MaybePromise } from "../storage.ts";

export type SqlValue = string | number | null;
export type SqlRow = ArrayLike<SqlValue>;

export interface SqlConn {
  /** Runs a statement that returns rows. */
  all(sql: string, args?: readonly SqlValue[]): MaybePromise<SqlRow[]>;
  /** Runs a statement that returns at most one row (cheaper than `all` in the binding); a DML with RETURNING does all its work. */
  get(sql: string, args?: readonly SqlValue[]): MaybePromise<SqlRow | undefined>;
  /** Runs a statement that returns no rows. */
  run(sql: string, args?: readonly SqlValue[]): MaybePromise<RunResult>;
}

/**
 * What the storage above a driver does at transaction boundaries (row-cache.ts): check whether another
 * connection wrote since (its cached rows are then dropped), write the rows it held back just before a
 * write transaction commits, and forget them when a transaction rolls back as a whole.
 */
export interface TxHooks {
  /** Right after BEGIN (the transaction's snapshot or write lock is held). */
  begin(c: SqlConn): MaybePromise<void>;
  /** Right before COMMIT of a write transaction, outside any caller's savepoint. */
  beforeCommit(c: SqlConn): MaybePromise<void>;
  /** The whole transaction rolled back (its callers all fail). */
  rolledBack(): void;
}

/** Rows changed, and the rowid of the last row inserted (rows inserted by one statement have consecutive rowids). */
export interface RunResult {
  changes: number;
  lastRowid: number;
}

export type SqlTxMode = "r" | "w";

export interface SqlDriver {
  /** "file", "memory" or "remote". */
  readonly kind: "file" | "memory" | "remote";
  /**
   * True when `PRAGMA data_version` on this driver's connection tells whether another connection has
   * committed since the last look (one long-lived connection: the embedded driver).
   */
  readonly versioned: boolean;
  /** Set once by the storage that owns the driver. */
  hooks: TxHooks | null;
  /** Runs `fn` in one transaction (write: `BEGIN IMMEDIATE`), one at a time per driver; rolls back if it throws. */
  tx<T>(mode: SqlTxMode, fn: (c: SqlConn) => MaybePromise<T>): Promise<T>;
  /** Runs a connection setting (PRAGMA) outside any transaction; returns its rows. */
  pragma(sql: string): Promise<SqlRow[]>;
  /**
   * Embedded file databases in WAL mode: moves WAL checkpoints to a background thread (checkpointer.ts).
   * Resolves false where that is not available (the engine's own checkpoints stay).
   */
  startBackgroundCheckpoints?(): Promise<boolean>;
  /** True while a background thread checkpoints this database. */
  readonly checkpointsInBackground?: boolean;
  close(): Promise<void>;
}

export interface DriverOptions {
  authToken?: string;
  /** Milliseconds a writer waits for another process's write lock before SQLITE_BUSY. */
  busyTimeoutMs: number;
  /** "native" (default for embedded URLs) or "client" (`@libsql/client`, the only choice for remote URLs). */
  driver?: "native" | "client";
}

/** Parsed location of a database. */
export interface DbLocation {
  kind: "file" | "memory" | "remote";
  /** File path for "file". */
  path: string;
  url: string;
}

export function parseDbUrl(url: string): DbLocation {
  if (url === ":memory:" || url === "file::memory:") return { kind: "memory", path: ":memory:", url: ":memory:" };
  if (url.startsWith("file:")) {
    let path = url.slice("file:".length);
    // file:///abs/path and file://localhost/abs/path -> /abs/path; file:rel/path stays relative.
    if (path.startsWith("//")) path = path.replace(/^\/\/(localhost)?/, "");
    const q = path.indexOf("?");
    if (q >= 0) path = path.slice(0, q);
    if (path === "") throw new ValidationError(`No file path in database URL ${url}`, ["url"]);
    return { kind: "file", path: decodeURIComponent(path), url };
  }
  if (/^(libsql|https?|wss?):\/\//i.test(url)) return { kind: "remote", path: "", url };
  throw new ValidationError(
    `Unsupported database URL ${JSON.stringify(url)}: use file:path.db, :memory:, libsql://, http(s):// or ws(s)://`,
    ["url"],
  );
}

export async function openDriver(loc: DbLocation, opts: DriverOptions): Promise<SqlDriver> {
  if (loc.kind !== "remote" && (opts.driver ?? "native") === "native") return NativeDriver.open(loc, opts);
  return ClientDriver.open(loc, opts);
}

// ---------------------------------------------------------------------------------------------------

interface NativeStatement {
  reader: boolean;
  raw(on?: boolean): NativeStatement;
  all(...params: unknown[]): unknown[];
  get(...params: unknown[]): unknown;
  run(...params: unknown[]): { changes: number; lastInsertRowid: number | bigint };
}
interface NativeDatabase {
  prepare(sql: string): NativeStatement;
  open: boolean;
  exec(sql: string): unknown;
  close(): unknown;
  inTransaction: boolean;
}

interface PendingWrite {
  fn: (c: SqlConn) => MaybePromise<unknown>;
  resolve(value: unknown): void;
  reject(err: unknown): void;
}

/** How long the engine itself blocks on a locked database before `beginWrite` retries asynchronously (ms). */
const SYNC_BUSY_WAIT_MS = 5;

/** Write transactions per group commit. */
const MAX_WRITE_GROUP = 256;

/** Prepared statements kept per connection; dynamic SQL beyond this many entries resets the cache. */
const STATEMENT_CACHE_LIMIT = 1000;

class NativeDriver implements SqlDriver {
  readonly versioned = true;
  hooks: TxHooks | null = null;
  private readonly mutex = new AsyncMutex();
  private readonly cache = new Map<string, NativeStatement>();
  private readonly conn: SqlConn;
  private closed = false;
  private checkpointer: BackgroundCheckpointer | null = null;

  private constructor(
    readonly kind: "file" | "memory",
    private readonly db: NativeDatabase,
    private readonly busyTimeoutMs: number,
    private readonly path: string,
  ) {
    this.conn = {
      all: (sql, args) => this.prepare(sql).all(args ?? []) as SqlValue[][],
      get: (sql, args) => this.prepare(sql).get(args ?? []) as SqlValue[] | undefined,
      run: (sql, args) => {
        const r = this.prepare(sql).run(args ?? []);
        return { changes: r.changes, lastRowid: Number(r.lastInsertRowid) };
      },
    };
    this.memberConn = new SavepointConn(this.conn, () => this.exec("SAVEPOINT lightning_tx"));
  }

  static async open(loc: DbLocation, opts: DriverOptions): Promise<NativeDriver> {
    const mod = (await import("libsql")) as unknown as { default: new (path: string, o?: object) => NativeDatabase };
    // The binding waits for a lock synchronously, stalling the event loop; so the engine waits only
    // briefly, and `beginWrite` keeps retrying asynchronously until `busyTimeoutMs` has passed.
    const db = new mod.default(loc.path, { timeout: Math.min(SYNC_BUSY_WAIT_MS, opts.busyTimeoutMs) });
    return new NativeDriver(loc.kind as "file" | "memory", db, opts.busyTimeoutMs, loc.path);
  }

  private prepare(sql: string): NativeStatement {
    let st = this.cache.get(sql);
    if (st === undefined) {
      st = this.db.prepare(sql);
      if (st.reader) st.raw(true);
      if (this.cache.size >= STATEMENT_CACHE_LIMIT) this.cache.clear();
      this.cache.set(sql, st);
    }
    return st;
  }

  /**
   * Reads run one at a time in a deferred transaction. Writes are group-committed: write transactions
   * requested while another group holds the connection queue up, and the next group runs them one after
   * another inside ONE `BEGIN IMMEDIATE ... COMMIT`, each in its own SAVEPOINT, opened by its first
   * statement (a failing one rolls back alone). The hooks run after BEGIN and just before COMMIT (the
   * storage's held-back rows go out there). Each caller's promise settles after the COMMIT, so the result
   * is the same as one transaction each, in the same order, but the commit (the WAL write, and its fsync
   * with synchronous=FULL) is shared.
   */
  tx<T>(mode: SqlTxMode, fn: (c: SqlConn) => MaybePromise<T>): Promise<T> {
    // A read asked for while writes wait for their group joins that group, so that calls still run in
    // the order they were made (a read never overtakes a write requested before it).
    if (mode === "r" && this.writes.length === 0) {
      return this.mutex.run(async () => {
        this.checkOpen();
        this.exec("BEGIN");
        try {
          await this.hooks?.begin(this.conn);
          const out = await fn(this.conn);
          this.exec("COMMIT");
          return out;
        } catch (e) {
          if (this.db.inTransaction) this.exec("ROLLBACK");
          this.hooks?.rolledBack();
          throw e;
        }
      });
    }
    return new Promise<T>((resolve, reject) => {
      this.writes.push({ fn, resolve: resolve as (v: unknown) => void, reject });
      if (!this.draining) {
        this.draining = true;
        void this.mutex.run(() => this.commitGroup());
      }
    });
  }

  private readonly writes: PendingWrite[] = [];
  private draining = false;
  /** The connection each member of a group gets in turn (one object: a group may have hundreds). */
  private readonly memberConn: SavepointConn;

  private exec(sql: string): void {
    this.prepare(sql).run();
  }

  /**
   * `BEGIN IMMEDIATE`, waiting for another process's write lock without blocking the event loop:
   * retries with a growing pause until `busyTimeoutMs`, then the SQLITE_BUSY error goes to the callers.
   */
  private async beginWrite(): Promise<void> {
    const deadline = Date.now() + this.busyTimeoutMs;
    for (let pause = 1; ; pause = Math.min(pause * 2, 25)) {
      try {
        this.exec("BEGIN IMMEDIATE");
        return;
      } catch (e) {
        if ((e as { code?: unknown }).code !== "SQLITE_BUSY" || Date.now() >= deadline) throw e;
      }
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, Math.min(pause, deadline - Date.now()))));
    }
  }

  private checkOpen(): void {
    if (this.closed) throw new Error("The libSQL store is closed");
  }

  private async commitGroup(): Promise<void> {
    // Let every caller that is ready by the next event-loop turn join this group (see next-turn.ts).
    await nextTurn();
    const group = this.writes.splice(0, MAX_WRITE_GROUP);
    const results: { ok: boolean; value: unknown }[] = [];
    try {
      this.checkOpen();
      await this.beginWrite();
      await this.hooks?.begin(this.conn);
      if (group.length === 1) {
        results.push({ ok: true, value: await group[0]!.fn(this.conn) });
      } else {
        // The savepoint is opened by a member's first statement: a member served from cached rows (its
        // writes held back by the storage until beforeCommit) needs none.
        const sp = this.memberConn;
        for (const w of group) {
          sp.open = false;
          try {
            const value = await w.fn(sp);
            if (sp.open) this.exec("RELEASE lightning_tx");
            results.push({ ok: true, value });
          } catch (e) {
            // SQLite may have rolled the whole transaction back (disk full, I/O error): then nothing of
            // the group survives, and the catch below fails every member.
            if (!this.db.inTransaction) throw e;
            if (sp.open) {
              this.exec("ROLLBACK TO lightning_tx");
              this.exec("RELEASE lightning_tx");
            }
            results.push({ ok: false, value: e });
          }
        }
      }
      await this.hooks?.beforeCommit(this.conn);
      this.exec("COMMIT");
      this.checkpointer?.committed();
    } catch (e) {
      if (this.db.open && this.db.inTransaction) this.exec("ROLLBACK");
      this.hooks?.rolledBack();
      for (const w of group) w.reject(e);
      return;
    } finally {
      if (this.writes.length > 0) void this.mutex.run(() => this.commitGroup());
      else this.draining = false;
    }
    group.forEach((w, i) => (results[i]!.ok ? w.resolve(results[i]!.value) : w.reject(results[i]!.value)));
  }

  pragma(sql: string): Promise<SqlRow[]> {
    return this.mutex.run(async () => {
      const st = this.db.prepare(sql);
      if (!st.reader) {
        st.run();
        return [];
      }
      return st.raw(true).all() as SqlRow[];
    });
  }

  get checkpointsInBackground(): boolean {
    return this.checkpointer?.running ?? false;
  }

  async startBackgroundCheckpoints(): Promise<boolean> {
    if (this.kind !== "file" || this.checkpointer) return this.checkpointer !== null;
    const { BackgroundCheckpointer, SAFETY_NET_PAGES } = await import("./checkpointer.ts");
    const onError = (err: Error): void => {
      // Back to the engine's own checkpoints on the event loop, so the WAL keeps being folded in.
      console.warn(`[lightning-ts] ${err.message}; checkpoints run on the main thread from now on`);
      this.checkpointer = null;
      if (!this.closed)
        void this.pragma("PRAGMA wal_autocheckpoint = 1000").catch((e) =>
          console.error("[lightning-ts] could not restore wal_autocheckpoint:", e),
        );
    };
    const started = await BackgroundCheckpointer.start(this.path, { onError });
    if (started === null) return false;
    if (this.closed) {
      await started.stop();
      return false;
    }
    this.checkpointer = started;
    await this.pragma(`PRAGMA wal_autocheckpoint = ${SAFETY_NET_PAGES}`);
    return true;
  }

  close(): Promise<void> {
    return this.mutex.run(async () => {
      if (this.closed) return;
      this.closed = true;
      this.cache.clear();
      await this.checkpointer?.stop();
      this.checkpointer = null;
      // The binding closes the file only when the garbage collector has dropped every prepared
      // statement, and the last close checkpoints the WAL: checkpoint now, so that late close (on the GC's
      // schedule, on the main thread) finds nothing to write. Other processes may still be reading: a
      // busy checkpoint is fine, it reports rather than throws.
      if (this.kind === "file") this.db.prepare("PRAGMA wal_checkpoint(TRUNCATE)").raw(true).all();
      this.db.close();
    });
  }
}

/** A member's connection: its first statement opens the member's savepoint (`open` says whether it did). */
class SavepointConn implements SqlConn {
  open = false;

  constructor(
    private readonly conn: SqlConn,
    private readonly openSavepoint: () => void,
  ) {}

  private enter(): void {
    if (this.open) return;
    this.openSavepoint();
    this.open = true;
  }

  all(sql: string, args?: readonly SqlValue[]): MaybePromise<SqlRow[]> {
    this.enter();
    return this.conn.all(sql, args);
  }

  get(sql: string, args?: readonly SqlValue[]): MaybePromise<SqlRow | undefined> {
    this.enter();
    return this.conn.get(sql, args);
  }

  run(sql: string, args?: readonly SqlValue[]): MaybePromise<RunResult> {
    this.enter();
    return this.conn.run(sql, args);
  }
}

// ---------------------------------------------------------------------------------------------------

interface ClientRows {
  rows: ArrayLike<SqlValue>[];
  rowsAffected: number;
  lastInsertRowid: bigint | undefined;
}
interface ClientTx {
  execute(stmt: { sql: string; args: SqlValue[] }): Promise<ClientRows>;
  commit(): Promise<void>;
  rollback(): Promise<void>;
  close(): void;
}
interface Client {
  transaction(mode: "write" | "read"): Promise<ClientTx>;
  execute(sql: string): Promise<ClientRows>;
  close(): void;
}

class ClientDriver implements SqlDriver {
  /** A remote server may answer each request on another connection: `data_version` proves nothing. */
  readonly versioned = false;
  hooks: TxHooks | null = null;
  private readonly mutex = new AsyncMutex();
  private closed = false;

  private constructor(
    readonly kind: "file" | "memory" | "remote",
    private readonly client: Client,
  ) {}

  static async open(loc: DbLocation, opts: DriverOptions): Promise<ClientDriver> {
    // The web build speaks HTTP/WebSocket only and has no native code; local files need the node build
    // (named explicitly: under some runtimes the bare specifier resolves to the web build).
    const mod = (loc.kind === "remote" ? await import("@libsql/client/web") : await import("@libsql/client/node")) as unknown as {
      createClient(c: object): Client;
    };
    const url = loc.kind === "memory" ? ":memory:" : loc.url;
    const client = mod.createClient({ url, authToken: opts.authToken, timeout: opts.busyTimeoutMs, intMode: "number", concurrency: 1 });
    return new ClientDriver(loc.kind, client);
  }

  tx<T>(mode: SqlTxMode, fn: (c: SqlConn) => MaybePromise<T>): Promise<T> {
    return this.mutex.run(async () => {
      if (this.closed) throw new Error("The libSQL store is closed");
      const t = await this.client.transaction(mode === "w" ? "write" : "read");
      const conn: SqlConn = {
        all: async (sql, args) => (await t.execute({ sql, args: (args ?? []) as SqlValue[] })).rows,
        get: async (sql, args) => (await t.execute({ sql, args: (args ?? []) as SqlValue[] })).rows[0],
        run: async (sql, args) => {
          const r = await t.execute({ sql, args: (args ?? []) as SqlValue[] });
          return { changes: r.rowsAffected, lastRowid: Number(r.lastInsertRowid ?? 0) };
        },
      };
      try {
        await this.hooks?.begin(conn);
        const out = await fn(conn);
        if (mode === "w") await this.hooks?.beforeCommit(conn);
        await t.commit();
        return out;
      } catch (e) {
        this.hooks?.rolledBack();
        await t.rollback();
        throw e;
      } finally {
        t.close();
      }
    });
  }

  pragma(sql: string): Promise<SqlRow[]> {
    return this.mutex.run(async () => (await this.client.execute(sql)).rows);
  }

  close(): Promise<void> {
    return this.mutex.run(async () => {
      if (this.closed) return;
      this.closed = true;
      // See NativeDriver.close: checkpoint while we control when the I/O happens.
      if (this.kind === "file") await this.client.execute("PRAGMA wal_checkpoint(TRUNCATE)");
      this.client.close();
    });
  }
}
