/** Opens the store behind `--db`: the in-memory store for `:memory:`, the libSQL store for everything else. */
import type { LightningStore } from "../store/base.ts";
import { InMemoryLightningStore } from "../store/memory.ts";
import type { Clock } from "../types/index.ts";

export interface OpenedStore {
  store: LightningStore;
  /** Where the data lives, for the startup message. */
  location: string;
}

const isMemory = (db: string): boolean => db === ":memory:" || db === "memory";

/** A db argument that is a plain path means an embedded file. */
export const normaliseDb = (db: string): string => (isMemory(db) || /^[a-z][a-z0-9+.-]*:/i.test(db) ? db : `file:${db}`);

export async function openServerStore(db: string, options: { clock?: Clock; cwd?: string; authToken?: string } = {}): Promise<OpenedStore> {
  const url = normaliseDb(db);
  // The server runs a background watchdog (DECISIONS row 11), so timeouts are noticed without traffic.
  const common = { clock: options.clock, watchdogIntervalSeconds: 5 };
  if (isMemory(url)) {
    return { store: new InMemoryLightningStore(common), location: "in memory (lost when the server stops)" };
  }
  const { LibsqlLightningStore } = await import("../store/libsql/index.ts");
  const store = await LibsqlLightningStore.open(url, { ...common, ...(options.authToken ? { authToken: options.authToken } : {}) });
  return { store, location: describeLocation(url, options.cwd) };
}

function describeLocation(url: string, cwd: string | undefined): string {
  if (url.startsWith("file:")) {
    const path = url.slice("file:".length);
    const abs = path.startsWith("/") || !cwd ? path : `${cwd.replace(/\/+$/, "")}/${path}`;
    return `embedded libSQL file ${abs}`;
  }
  // Never print credentials that may sit in the URL.
  return `libSQL server ${url.replace(/\/\/[^@/]*@/, "//")}`;
}
