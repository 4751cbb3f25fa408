/** Opens the store behind `--db` with the library's one rule (`openStore`), adding what the server needs. */
import type { LightningStore } from "../store/base.ts";
import type { Clock } from "../types/index.ts";

export interface OpenedStore {
  store: LightningStore;
  /** Where the data lives, for the startup message. */
  location: string;
}

/** A db argument that is a plain path means an embedded file; `memory`, `:memory:` and URLs stay as they are. */
export const normaliseDb = (db: string): string =>
  db === "memory" || db === ":memory:" || /^[a-z][a-z0-9+.-]*:/i.test(db) ? db : `file:${db}`;

export interface OpenServerStoreOptions {
  clock?: Clock;
  cwd?: string;
  authToken?: string;
  /** Seconds between background watchdog scans; null: none (another process of the cluster runs it). Default 5. */
  watchdogIntervalSeconds?: number | null;
  /** Minimum seconds between two lazy watchdog scans (the store's default unless given). */
  scanDebounceSeconds?: number;
  /** File databases: checkpoint the WAL from a thread of its own (default true; see LibsqlLightningStoreOptions). */
  backgroundCheckpoints?: boolean;
}

/** True for the locations whose data lives inside one process (`memory`, `:memory:`): no other process can share them. */
export const isPrivateDb = (db: string): boolean => {
  const url = normaliseDb(db);
  return url === "memory" || url === ":memory:" || url === "file::memory:";
};

export async function openServerStore(db: string, options: OpenServerStoreOptions = {}): Promise<OpenedStore> {
  const url = normaliseDb(db);
  // The server runs a background watchdog (docs/departures.md#11), so timeouts are noticed without traffic.
  const common = {
    clock: options.clock,
    watchdogIntervalSeconds: options.watchdogIntervalSeconds === undefined ? 5 : options.watchdogIntervalSeconds,
    ...(options.scanDebounceSeconds === undefined ? {} : { scanDebounceSeconds: options.scanDebounceSeconds }),
    ...(options.backgroundCheckpoints === undefined ? {} : { backgroundCheckpoints: options.backgroundCheckpoints }),
    ...(options.authToken ? { authToken: options.authToken } : {}),
  };
  // Loaded lazily: the libSQL driver is only needed when the server really opens one.
  const { openStore } = await import("../store/libsql/open.ts");
  return { store: await openStore(url, common), location: describeLocation(url, options.cwd) };
}

function describeLocation(url: string, cwd: string | undefined): string {
  if (url === "memory") return "in memory (InMemoryLightningStore; lost when the server stops)";
  if (url === ":memory:") return "libSQL in memory (lost when the server stops)";
  if (url.startsWith("file:")) {
    const path = url.slice("file:".length);
    const abs = path.startsWith("/") || !cwd ? path : `${cwd.replace(/\/+$/, "")}/${path}`;
    return `embedded libSQL file ${abs}`;
  }
  // Never print credentials that may sit in the URL.
  return `libSQL server ${url.replace(/\/\/[^@/]*@/, "//")}`;
}
