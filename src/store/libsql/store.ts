/**
 * `LibsqlLightningStore`: the store semantics of `LightningStoreCore` (the same code as the in-memory
 * store) persisted in libSQL. Where the data lives is one URL:
 * - `file:path.db` (the embedded default, `DEFAULT_STORE_URL`): a local file, shareable by several
 *   processes on one machine;
 * - `:memory:`: a private in-memory libSQL database (tests, throwaway runs);
 * - `libsql://`, `http(s)://`, `ws(s)://` with `authToken`: a libSQL server (sqld / Turso) that several
 *   machines share.
 *
 * Durability (file databases): WAL journal with `synchronous=NORMAL` by default. A transaction is
 * durable against a process crash (SIGKILL, OOM kill, an exception) as soon as its promise resolves:
 * it is in the WAL file. A power loss or OS crash can drop the last transactions committed before it
 * (never corrupting the file), because NORMAL only fsyncs at checkpoints. `synchronous: "full"` fsyncs
 * the WAL on every commit: nothing committed is lost even on power loss, at the cost of one fsync per
 * transaction (on the order of 0.1-10 ms depending on the disk) - group commit amortises it for spans.
 */
import { platform } from "../../platform/index.ts";
import { ValidationError } from "../../types/index.ts";
import { LightningStoreCore, type LightningStoreCoreOptions } from "../core.ts";
import { openDriver, parseDbUrl, type DbLocation, type SqlDriver } from "./driver.ts";
import { applyMigrations } from "./migrate.ts";
import { MIGRATIONS } from "./migrations/index.ts";
import { DEFAULT_ROW_CACHE_MIB } from "./row-cache.ts";
import { LibsqlStorage, type RowCacheUsage } from "./storage.ts";

export { DEFAULT_ROW_CACHE_MIB };

/** The embedded default: a file in the working directory. */
export const DEFAULT_STORE_URL = "file:agl-store.db";

export interface LibsqlLightningStoreOptions extends LightningStoreCoreOptions {
  /** Auth token for a libSQL server URL. */
  authToken?: string;
  /** How long a write waits for another process holding the database's write lock (ms). Default 10,000. */
  busyTimeoutMs?: number;
  /** File databases: "normal" (default) or "full"; see the durability note above. */
  synchronous?: "normal" | "full";
  /** Embedded URLs: "native" (default, the libsql binding) or "client" (`@libsql/client`). Remote URLs always use the client. */
  driver?: "native" | "client";
  /**
   * File databases on the native driver: fold the WAL into the database file from a background thread
   * (default true) instead of inside the COMMIT that fills it (see checkpointer.ts).
   */
  backgroundCheckpoints?: boolean;
  /**
   * File databases: SQLite's page cache for the store's connection, in MiB (default 32; SQLite's own
   * default is 2). The unique index on span ids takes random inserts, so once it outgrows the cache
   * every batch of spans rereads its pages from the OS. Memory is taken only as pages are read.
   */
  cacheSizeMiB?: number;
  /**
   * The store's own cache of rollout, attempt, worker and resources rows between transactions, in MiB
   * of estimated heap (default 64, `DEFAULT_ROW_CACHE_MIB`). Past it the cache is dropped and rows are
   * read from SQL again as needed; 0 keeps rows only within a transaction. See docs/store.md.
   */
  rowCacheMiB?: number;
}

/** Default page cache of a file store's connection (MiB); see `cacheSizeMiB`. */
export const DEFAULT_CACHE_SIZE_MIB = 32;

export class LibsqlLightningStore extends LightningStoreCore {
  private constructor(
    readonly location: DbLocation,
    storage: LibsqlStorage,
    options: LibsqlLightningStoreOptions,
  ) {
    // Several processes can share one database, so the store is safe beyond one event loop.
    super(storage, "LibsqlLightningStore", options, { thread_safe: true, async_safe: true, zero_copy: true, otlp_traces: false });
  }

  /** Opens (creating it if needed) the database at `url` and brings its schema up to date. */
  static async open(url: string = DEFAULT_STORE_URL, options: LibsqlLightningStoreOptions = {}): Promise<LibsqlLightningStore> {
    const location = parseDbUrl(url);
    const sync = options.synchronous ?? "normal";
    if (sync !== "normal" && sync !== "full")
      throw new ValidationError(`synchronous must be "normal" or "full", got ${String(sync)}`, ["synchronous"]);
    const cacheMiB = options.cacheSizeMiB ?? DEFAULT_CACHE_SIZE_MIB;
    if (!Number.isInteger(cacheMiB) || cacheMiB < 1)
      throw new ValidationError(`cacheSizeMiB must be a whole number of MiB >= 1, got ${String(cacheMiB)}`, ["cacheSizeMiB"]);
    const rowCacheMiB = options.rowCacheMiB ?? DEFAULT_ROW_CACHE_MIB;
    if (typeof rowCacheMiB !== "number" || !Number.isFinite(rowCacheMiB) || rowCacheMiB < 0) {
      throw new ValidationError(`rowCacheMiB must be a number of MiB >= 0, got ${String(rowCacheMiB)}`, ["rowCacheMiB"]);
    }
    const busyTimeoutMs = options.busyTimeoutMs ?? 10_000;
    let driver: SqlDriver;
    try {
      driver = await openDriver(location, { authToken: options.authToken, busyTimeoutMs, driver: options.driver });
    } catch (e) {
      throw (await missingFolder(location, url)) ?? e;
    }
    try {
      await configure(driver, location, sync, cacheMiB);
      if (options.backgroundCheckpoints !== false) await driver.startBackgroundCheckpoints?.();
      await applyMigrations(driver, MIGRATIONS);
    } catch (e) {
      await driver.close();
      throw e;
    }
    return new LibsqlLightningStore(location, new LibsqlStorage(driver, { rowCacheMiB }), options);
  }

  /** True while WAL checkpoints run on a background thread (file databases on the native driver; see `backgroundCheckpoints`). */
  get checkpointsInBackground(): boolean {
    return this.libsql.driver.checkpointsInBackground ?? false;
  }

  /** SQLite's `PRAGMA integrity_check` on this database: `["ok"]` when the file is sound. */
  async integrityCheck(): Promise<string[]> {
    return (await this.libsql.driver.pragma("PRAGMA integrity_check")).map((r) => String(r[0]));
  }

  /** The row cache's estimated size now and its budget (`rowCacheMiB`), in bytes; see docs/store.md. */
  get rowCache(): RowCacheUsage {
    return this.libsql.rowCacheUsage();
  }

  private get libsql(): LibsqlStorage {
    return this.storage as LibsqlStorage;
  }
}

async function configure(driver: SqlDriver, loc: DbLocation, sync: "normal" | "full", cacheMiB: number): Promise<void> {
  // A server owns its journal, cache and durability settings; the busy timeout is the driver's business.
  if (loc.kind !== "file") return;
  // Negative: a size in KiB rather than in pages.
  await driver.pragma(`PRAGMA cache_size = -${cacheMiB * 1024}`);
  const mode = await driver.pragma("PRAGMA journal_mode = WAL");
  if (String(mode[0]?.[0]).toLowerCase() !== "wal")
    throw new Error(`Could not switch ${loc.path} to WAL mode (got ${String(mode[0]?.[0])})`);
  await driver.pragma(`PRAGMA synchronous = ${sync === "full" ? "FULL" : "NORMAL"}`);
}

/** Why a database file could not be opened, when the reason is its folder: missing (the engine says only "14"). */
async function missingFolder(location: DbLocation, url: string): Promise<ValidationError | null> {
  if (location.kind !== "file") return null;
  const slash = location.path.lastIndexOf("/");
  const folder = slash < 0 ? "." : slash === 0 ? "/" : location.path.slice(0, slash);
  if (await platform.files().exists(folder)) return null;
  return new ValidationError(
    `cannot open the database ${url}: the folder ${folder} does not exist (create it, or give a file in an existing folder)`,
    ["url"],
  );
}
