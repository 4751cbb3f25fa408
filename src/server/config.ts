/**
 * The settings of an `agl store` server (src/server/run.ts) and their defaults. The command line and
 * the environment fill them in src/cli/store.ts (`agl store --help`; docs/server.md).
 */
import type { LogLevel } from "../platform/log.ts";
import { DEFAULT_STORE_URL } from "../store/libsql/store.ts";
import type { IdempotencyOptions } from "./idempotency.ts";
import type { ServeLimits } from "../platform/index.ts";

export const DEFAULT_HOST = "127.0.0.1";
export const DEFAULT_PORT = 4747;
export const DEFAULT_DB = DEFAULT_STORE_URL;

export interface StoreServerConfig {
  host: string;
  port: number;
  /** A location for `openStore`: `file:path.db` (embedded libSQL), `:memory:` (libSQL in memory), `memory` (InMemoryLightningStore), or a libSQL server URL. */
  db: string;
  token: string | null;
  /** Where the token came from, for the startup message (`--token` on a command line shows in `ps`). */
  tokenSource: "--token" | "--token-file" | "AGL_STORE_TOKEN" | "AGL_STORE_TOKEN_FILE" | null;
  corsOrigins: string[];
  /** `Host` names answered besides localhost, IP addresses and `host` (src/server/browser-guard.ts). */
  allowedHosts: string[];
  logLevel: LogLevel;
  bodyLimitBytes: number;
  /** Bounds of the answers remembered for `Idempotency-Key` retries (src/server/idempotency.ts). */
  idempotency: Required<Omit<IdempotencyOptions, "now">>;
  /** Timeouts and the connection cap of the HTTP server (src/platform/: serveFetch). */
  limits: ServeLimits;
  /** Items of a list answer without `limit`; null: all of them, as upstream (docs/http-api.md#list-answers). */
  pageSize: number | null;
  /** Most items of one list answer; null: no cap. */
  maxPageSize: number | null;
  /** Characters of JSON after which a list answer ends; null: no cap. */
  maxPageChars: number | null;
  /** Serve the dashboard at `/` (`--no-dashboard` turns it off). */
  dashboard: boolean;
  /** Processes serving the port and the database (`--workers`; 1: this process alone; src/server/cluster/). */
  workers: number;
  /** TEST-ONLY: a settable ManualClock and a reset route (src/server/test-hooks.ts). */
  testClock: boolean;
  help: boolean;
}

/** A bad setting from a command line or the environment: the CLI prints it with the usage and exits 2. */
export class UsageError extends Error {}
