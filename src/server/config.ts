/**
 * `agl store` options from flags and environment (listed by `agl store --help`; docs/server.md), shared
 * by the CLI and the three runtime entries. Flags win over the environment, which wins over the defaults.
 */
import { parseLogLevel, type LogLevel } from "../platform/log.ts";
import { DEFAULT_BODY_LIMIT } from "./app.ts";
import { DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE } from "./paging.ts";
import { DEFAULT_STORE_URL } from "../store/libsql/store.ts";
import {
  DEFAULT_IDEMPOTENCY_MAX_BYTES,
  DEFAULT_IDEMPOTENCY_MAX_KEYS,
  DEFAULT_IDEMPOTENCY_TTL_SECONDS,
  type IdempotencyOptions,
} from "./idempotency.ts";
import { DEFAULT_SERVE_LIMITS, platform, type ServeLimits } from "../platform/index.ts";

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
  logLevel: LogLevel;
  bodyLimitBytes: number;
  /** Bounds of the answers remembered for `Idempotency-Key` retries (src/server/idempotency.ts). */
  idempotency: Required<Omit<IdempotencyOptions, "now">>;
  /** Timeouts and the connection cap of the HTTP server (src/platform/: serveFetch). */
  limits: ServeLimits;
  /** Items of a list answer without `limit`; null: the default (docs/departures.md#22). */
  pageSize: number | null;
  /** Most items of one list answer; null: the default. */
  maxPageSize: number | null;
  /** Serve the dashboard at `/` (`--no-dashboard` turns it off). */
  dashboard: boolean;
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
                        (visible to other users in ps: prefer --token-file or the environment variable)
  --token-file PATH     the same, the token read from a file (surrounding whitespace dropped)       [AGL_STORE_TOKEN_FILE]
  --cors-origin ORIGIN  allow browser calls from ORIGIN (repeatable; * allows any, without credentials)
  --log-level LEVEL     debug | info | warning | error (default info)
  --body-limit BYTES    largest request body (default ${DEFAULT_BODY_LIMIT})
  --idempotency-ttl SECONDS
                        how long the answer to a write sent with an Idempotency-Key is kept for its retries (default ${DEFAULT_IDEMPOTENCY_TTL_SECONDS})
  --idempotency-keys N  how many such answers are kept at most (default ${DEFAULT_IDEMPOTENCY_MAX_KEYS})
  --idempotency-bytes BYTES
                        total size of the kept answers at most (default ${DEFAULT_IDEMPOTENCY_MAX_BYTES})
  --headers-timeout S   seconds a client may take to send a request's headers (default ${DEFAULT_SERVE_LIMITS.headersTimeoutSeconds})
  --request-timeout S   seconds a client may take to send a whole request, body included (default ${DEFAULT_SERVE_LIMITS.requestTimeoutSeconds})
  --keep-alive-timeout S  seconds an idle keep-alive connection stays open (default ${DEFAULT_SERVE_LIMITS.keepAliveTimeoutSeconds})
  --max-connections N   open connections at most; more are closed at once (default ${DEFAULT_SERVE_LIMITS.maxConnections})
  --page-size N         items of a list answer without a limit (default ${DEFAULT_PAGE_SIZE})
  --max-page-size N     most items of one list answer or dequeue (default ${MAX_PAGE_SIZE})
  --no-dashboard        do not serve the dashboard at / (docs/dashboard.md)
  -h, --help            show this help

Running it safely (token, CORS, timeouts, limits): docs/server.md
`;

export class UsageError extends Error {}

type Env = (name: string) => string | undefined;
type ReadText = (path: string) => string;

const readTextFile: ReadText = (path) => platform.readTextFile(path);

/** `--token` or `--token-file` as given on the command line. */
type TokenFlag = { token: string; source: "--token" } | { path: string; source: "--token-file" };

function intOf(v: string, name: string, min: number, max: number): number {
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
    throw new UsageError(`${name} must be an integer in [${min}, ${max}] (got ${JSON.stringify(v)})`);
  }
  return n;
}

/** A token as given, or a clear refusal: an empty one would silently turn authentication off. */
function nonEmptyToken(token: string, source: string): string {
  const t = token.trim();
  if (t === "") throw new UsageError(`${source} is empty: give a token, or leave it out to run without authentication`);
  return t;
}

function tokenFromFile(path: string, source: string, read: ReadText): string {
  if (path.trim() === "") throw new UsageError(`${source} is empty: give the path of a file holding the token`);
  let text: string;
  try {
    text = read(path);
  } catch (e) {
    throw new UsageError(`${source}: cannot read ${JSON.stringify(path)}: ${e instanceof Error ? e.message : String(e)}`);
  }
  return nonEmptyToken(text, `the token file ${JSON.stringify(path)} (${source})`);
}

/** A positive number of seconds (fractions allowed, for tests). */
function secondsOf(v: string, name: string): number {
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n) || n <= 0 || n > 86_400) {
    throw new UsageError(`${name} must be a number of seconds in (0, 86400] (got ${JSON.stringify(v)})`);
  }
  return n;
}

export function parseStoreArgs(argv: readonly string[], env: Env = () => undefined, readFile: ReadText = readTextFile): StoreServerConfig {
  const cfg: StoreServerConfig = {
    host: env("AGL_SERVER_HOST") || DEFAULT_HOST,
    port: env("AGL_SERVER_PORT") ? intOf(env("AGL_SERVER_PORT")!, "AGL_SERVER_PORT", 0, 65535) : DEFAULT_PORT,
    db: env("AGL_STORE_DB") || DEFAULT_DB,
    token: null,
    tokenSource: null,
    corsOrigins: [],
    logLevel: "info",
    bodyLimitBytes: DEFAULT_BODY_LIMIT,
    idempotency: {
      ttlSeconds: DEFAULT_IDEMPOTENCY_TTL_SECONDS,
      maxKeys: DEFAULT_IDEMPOTENCY_MAX_KEYS,
      maxBytes: DEFAULT_IDEMPOTENCY_MAX_BYTES,
    },
    limits: { ...DEFAULT_SERVE_LIMITS },
    pageSize: null,
    maxPageSize: null,
    dashboard: true,
    testClock: false,
    help: false,
  };
  let tokenFlag: TokenFlag | null = null;
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
      case "--token-file": {
        const v = value();
        if (tokenFlag !== null && tokenFlag.source !== flag) throw new UsageError("give --token or --token-file, not both");
        tokenFlag = flag === "--token" ? { token: v, source: flag } : { path: v, source: "--token-file" };
        break;
      }
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
      case "--headers-timeout":
        cfg.limits.headersTimeoutSeconds = secondsOf(value(), flag);
        break;
      case "--request-timeout":
        cfg.limits.requestTimeoutSeconds = secondsOf(value(), flag);
        break;
      case "--keep-alive-timeout":
        cfg.limits.keepAliveTimeoutSeconds = secondsOf(value(), flag);
        break;
      case "--max-connections":
        cfg.limits.maxConnections = intOf(value(), flag, 1, 1_000_000);
        break;
      case "--page-size":
        cfg.pageSize = intOf(value(), "--page-size", 1, Number.MAX_SAFE_INTEGER);
        break;
      case "--max-page-size":
        cfg.maxPageSize = intOf(value(), "--max-page-size", 1, Number.MAX_SAFE_INTEGER);
        break;
      case "--no-dashboard":
        cfg.dashboard = false;
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
  resolveToken(cfg, tokenFlag, env, readFile);
  if (cfg.pageSize !== null && cfg.pageSize > (cfg.maxPageSize ?? MAX_PAGE_SIZE)) {
    throw new UsageError(`--page-size (${cfg.pageSize}) must not exceed --max-page-size (${cfg.maxPageSize ?? MAX_PAGE_SIZE})`);
  }
  return cfg;
}

/** Flags win over the environment; an empty token anywhere is refused rather than read as "no token". */
function resolveToken(cfg: StoreServerConfig, flag: TokenFlag | null, env: Env, readFile: ReadText): void {
  if (flag !== null) {
    cfg.token = "token" in flag ? nonEmptyToken(flag.token, flag.source) : tokenFromFile(flag.path, flag.source, readFile);
    cfg.tokenSource = flag.source;
    return;
  }
  const fromEnv = env("AGL_STORE_TOKEN");
  const fileFromEnv = env("AGL_STORE_TOKEN_FILE");
  if (fromEnv !== undefined && fileFromEnv !== undefined) throw new UsageError("set AGL_STORE_TOKEN or AGL_STORE_TOKEN_FILE, not both");
  if (fromEnv !== undefined) {
    cfg.token = nonEmptyToken(fromEnv, "AGL_STORE_TOKEN");
    cfg.tokenSource = "AGL_STORE_TOKEN";
  } else if (fileFromEnv !== undefined) {
    cfg.token = tokenFromFile(fileFromEnv, "AGL_STORE_TOKEN_FILE", readFile);
    cfg.tokenSource = "AGL_STORE_TOKEN_FILE";
  }
}
