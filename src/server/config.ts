/**
 * `agl store` options from flags and environment (store.md §5), shared by the CLI and the three
 * runtime entries. Flags win over the environment, which wins over the defaults.
 */
import { parseLogLevel, type LogLevel } from "./log.ts";
import { DEFAULT_BODY_LIMIT } from "./app.ts";
import { DEFAULT_STORE_URL } from "../store/libsql/store.ts";
import { DEFAULT_IDEMPOTENCY_MAX_BYTES, DEFAULT_IDEMPOTENCY_MAX_KEYS, DEFAULT_IDEMPOTENCY_TTL_SECONDS, type IdempotencyOptions } from "./idempotency.ts";

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
  /** Bounds of the answers remembered for `Idempotency-Key` retries (src/server/idempotency.ts). */
  idempotency: Required<Omit<IdempotencyOptions, "now">>;
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
  --idempotency-ttl SECONDS
                        how long the answer to a write sent with an Idempotency-Key is kept for its retries (default ${DEFAULT_IDEMPOTENCY_TTL_SECONDS})
  --idempotency-keys N  how many such answers are kept at most (default ${DEFAULT_IDEMPOTENCY_MAX_KEYS})
  --idempotency-bytes BYTES
                        total size of the kept answers at most (default ${DEFAULT_IDEMPOTENCY_MAX_BYTES})
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
    idempotency: { ttlSeconds: DEFAULT_IDEMPOTENCY_TTL_SECONDS, maxKeys: DEFAULT_IDEMPOTENCY_MAX_KEYS, maxBytes: DEFAULT_IDEMPOTENCY_MAX_BYTES },
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
      case "--idempotency-ttl":
        cfg.idempotency.ttlSeconds = intOf(value(), "--idempotency-ttl", 1, 7 * 24 * 3600);
        break;
      case "--idempotency-keys":
        cfg.idempotency.maxKeys = intOf(value(), "--idempotency-keys", 1, 10_000_000);
        break;
      case "--idempotency-bytes":
        cfg.idempotency.maxBytes = intOf(value(), "--idempotency-bytes", 1, Number.MAX_SAFE_INTEGER);
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
  return cfg;
}
