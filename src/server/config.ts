/**
 * `agl store` options from flags and environment (store.md §5), shared by the CLI and the three
 * runtime entries. Flags win over the environment, which wins over the defaults.
 */
import { parseLogLevel, type LogLevel } from "./log.ts";
import { DEFAULT_BODY_LIMIT } from "./app.ts";
import { DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE } from "./paging.ts";
import { DEFAULT_STORE_URL } from "../store/libsql/store.ts";

export const DEFAULT_HOST = "127.0.0.1";
export const DEFAULT_PORT = 4747;
export const DEFAULT_DB = DEFAULT_STORE_URL;

export interface StoreServerConfig {
  host: string;
  port: number;
  /** A location for `openStore`: `file:path.db` (embedded libSQL), `:memory:` (libSQL in memory), `memory` (InMemoryLightningStore), or a libSQL server URL. */
  db: string;
  token: string | null;
  corsOrigins: string[];
  logLevel: LogLevel;
  bodyLimitBytes: number;
  /** Items of a list answer without `limit`; null: the default (docs/departures.md#22). */
  pageSize: number | null;
  /** Most items of one list answer; null: the default. */
  maxPageSize: number | null;
  /** TEST-ONLY: a settable ManualClock and a reset route (src/server/test-hooks.ts). */
  testClock: boolean;
  help: boolean;
}

export const STORE_USAGE = `Usage: agl store [options]

Serves a LightningStore over HTTP (Agent Lightning's /v1/agl API, OTLP at /v1/traces, Prometheus at /metrics).

Options:
  --host HOST           interface to bind (default ${DEFAULT_HOST}; 0.0.0.0 for all interfaces)   [AGL_SERVER_HOST]
  --port PORT           port (default ${DEFAULT_PORT}; 0 picks a free one)                            [AGL_SERVER_PORT]
  --db URL              file:path.db (embedded libSQL, default ${DEFAULT_DB}), memory (InMemoryLightningStore), :memory: (libSQL in memory),
                        or libsql://… / http(s)://… (a libSQL server; auth token from AGL_STORE_DB_TOKEN)  [AGL_STORE_DB]
  --token TOKEN         require "Authorization: Bearer TOKEN" on every route but /v1/agl/health          [AGL_STORE_TOKEN]
  --cors-origin ORIGIN  allow browser calls from ORIGIN (repeatable; * allows any)
  --log-level LEVEL     debug | info | warning | error (default info)
  --body-limit BYTES    largest request body (default ${DEFAULT_BODY_LIMIT})
  --page-size N         items of a list answer without a limit (default ${DEFAULT_PAGE_SIZE})
  --max-page-size N     most items of one list answer or dequeue (default ${MAX_PAGE_SIZE})
  -h, --help            show this help
`;

export class UsageError extends Error {}

type Env = (name: string) => string | undefined;

function intOf(v: string, name: string, min: number, max: number): number {
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
    throw new UsageError(`${name} must be an integer in [${min}, ${max}] (got ${JSON.stringify(v)})`);
  }
  return n;
}

export function parseStoreArgs(argv: readonly string[], env: Env = () => undefined): StoreServerConfig {
  const cfg: StoreServerConfig = {
    host: env("AGL_SERVER_HOST") || DEFAULT_HOST,
    port: env("AGL_SERVER_PORT") ? intOf(env("AGL_SERVER_PORT")!, "AGL_SERVER_PORT", 0, 65535) : DEFAULT_PORT,
    db: env("AGL_STORE_DB") || DEFAULT_DB,
    token: env("AGL_STORE_TOKEN") || null,
    corsOrigins: [],
    logLevel: "info",
    bodyLimitBytes: DEFAULT_BODY_LIMIT,
    pageSize: null,
    maxPageSize: null,
    testClock: false,
    help: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const eq = arg.startsWith("--") ? arg.indexOf("=") : -1;
    const flag = eq > 0 ? arg.slice(0, eq) : arg;
    const value = (): string => {
      if (eq > 0) return arg.slice(eq + 1);
      const v = argv[++i];
      if (v === undefined) throw new UsageError(`${flag} needs a value`);
      return v;
    };
    switch (flag) {
      case "--host":
        cfg.host = value();
        break;
      case "--port":
        cfg.port = intOf(value(), "--port", 0, 65535);
        break;
      case "--db":
        cfg.db = value();
        break;
      case "--token":
        cfg.token = value() || null;
        break;
      case "--cors-origin":
        cfg.corsOrigins.push(value());
        break;
      case "--log-level":
        try {
          cfg.logLevel = parseLogLevel(value());
        } catch (e) {
          throw new UsageError((e as Error).message);
        }
        break;
      case "--body-limit":
        cfg.bodyLimitBytes = intOf(value(), "--body-limit", 1, Number.MAX_SAFE_INTEGER);
        break;
      case "--page-size":
        cfg.pageSize = intOf(value(), "--page-size", 1, Number.MAX_SAFE_INTEGER);
        break;
      case "--max-page-size":
        cfg.maxPageSize = intOf(value(), "--max-page-size", 1, Number.MAX_SAFE_INTEGER);
        break;
      case "--test-clock":
        cfg.testClock = true;
        break;
      case "-h":
      case "--help":
        cfg.help = true;
        break;
      default:
        throw new UsageError(`unknown option ${JSON.stringify(arg)}`);
    }
  }
  if (cfg.pageSize !== null && cfg.pageSize > (cfg.maxPageSize ?? MAX_PAGE_SIZE)) {
    throw new UsageError(`--page-size (${cfg.pageSize}) must not exceed --max-page-size (${cfg.maxPageSize ?? MAX_PAGE_SIZE})`);
  }
  return cfg;
}
