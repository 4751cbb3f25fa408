/**
 * `agl store` options from flags and environment (listed by `agl store --help`; docs/server.md), for the
 * CLI and the three runtime entries. Flags win over the environment, which wins over the defaults.
 */
import { parseLogLevel } from "../platform/log.ts";
import { DEFAULT_SERVE_LIMITS, defaultPerAddressLimit, platform } from "../platform/index.ts";
import { DEFAULT_BODY_LIMIT } from "../server/app.ts";
import { DEFAULT_DB, DEFAULT_HOST, DEFAULT_PORT, type StoreServerConfig, UsageError } from "../server/config.ts";
import { DEFAULT_IDEMPOTENCY_MAX_BYTES, DEFAULT_IDEMPOTENCY_MAX_KEYS, DEFAULT_IDEMPOTENCY_TTL_SECONDS } from "../server/idempotency.ts";
import { MAX_DEQUEUE_SIZE } from "../server/paging.ts";
import {
  allowedHostFlag,
  type CommandSpec,
  formatHelp,
  PORT_BOUNDS,
  parseAllowedHosts,
  parseFlags,
  parseNumber,
  portFlag,
} from "./flags.ts";

const MAX = Number.MAX_SAFE_INTEGER;
/** An opt-in page cap (docs/http-api.md#list-answers). */
const PAGE_CAP = { type: "number", integer: true, min: 1, max: MAX, value: "N" } as const;
const WORKERS_BOUNDS = { integer: true, min: 1, max: 256 } as const;
const SECONDS = { type: "number", value: "S", unit: "seconds", min: 0, exclusiveMin: true, max: 86_400 } as const;

export const STORE_COMMAND = {
  usage: "agl store [options]",
  about: "Serves a LightningStore over HTTP (Agent Lightning's /v1/agl API, OTLP at /v1/traces, Prometheus at /v1/agl/prometheus/).",
  sections: [
    {
      title: "Options:",
      flags: [
        {
          name: "host",
          type: "string",
          value: "HOST",
          help: `interface to bind (default ${DEFAULT_HOST}; 0.0.0.0 for all interfaces)`,
          env: "AGL_SERVER_HOST",
        },
        { ...portFlag(`port (default ${DEFAULT_PORT}; 0 picks a free one)`), env: "AGL_SERVER_PORT" },
        {
          name: "db",
          type: "string",
          value: "URL",
          help:
            `file:path.db (embedded libSQL, default ${DEFAULT_DB}), memory (InMemoryLightningStore), :memory: (libSQL in memory),\n` +
            "or libsql://… / http(s)://… (a libSQL server; auth token from AGL_STORE_DB_TOKEN)",
          env: "AGL_STORE_DB",
        },
        {
          name: "token",
          type: "string",
          value: "TOKEN",
          help:
            'require "Authorization: Bearer TOKEN" on every route but /v1/agl/health\n' +
            "(visible to other users in ps: prefer --token-file or the environment variable)",
          env: "AGL_STORE_TOKEN",
        },
        {
          name: "token-file",
          type: "string",
          value: "PATH",
          help: "the same, the token read from a file (surrounding whitespace dropped)",
          env: "AGL_STORE_TOKEN_FILE",
        },
        {
          name: "cors-origin",
          type: "string",
          repeatable: true,
          value: "ORIGIN",
          help: "allow browser calls from ORIGIN (repeatable; * allows any, without credentials)",
        },
        allowedHostFlag,
        { name: "log-level", type: "string", value: "LEVEL", help: "debug | info | warning | error (default info)" },
        {
          name: "body-limit",
          type: "number",
          integer: true,
          min: 1,
          max: MAX,
          value: "BYTES",
          help: `largest request body (default ${DEFAULT_BODY_LIMIT})`,
        },
        {
          name: "idempotency-ttl",
          type: "number",
          integer: true,
          min: 1,
          max: 7 * 24 * 3600,
          value: "SECONDS",
          help: `how long the answer to a write sent with an Idempotency-Key is kept for its retries (default ${DEFAULT_IDEMPOTENCY_TTL_SECONDS})`,
        },
        {
          name: "idempotency-keys",
          type: "number",
          integer: true,
          min: 1,
          max: 10_000_000,
          value: "N",
          help: `how many such answers are kept at most (default ${DEFAULT_IDEMPOTENCY_MAX_KEYS})`,
        },
        {
          name: "idempotency-bytes",
          type: "number",
          integer: true,
          min: 1,
          max: MAX,
          value: "BYTES",
          help: `total size of the kept answers at most (default ${DEFAULT_IDEMPOTENCY_MAX_BYTES})`,
        },
        {
          name: "headers-timeout",
          ...SECONDS,
          help: `seconds a client may take to send a request's headers (default ${DEFAULT_SERVE_LIMITS.headersTimeoutSeconds})`,
        },
        {
          name: "request-timeout",
          ...SECONDS,
          help: `seconds a client may take to send a whole request, body included (default ${DEFAULT_SERVE_LIMITS.requestTimeoutSeconds})`,
        },
        {
          name: "keep-alive-timeout",
          ...SECONDS,
          help: `seconds an idle keep-alive connection stays open (default ${DEFAULT_SERVE_LIMITS.keepAliveTimeoutSeconds})`,
        },
        {
          name: "max-connections",
          type: "number",
          integer: true,
          min: 1,
          max: 1_000_000,
          value: "N",
          help:
            `open connections at most (default ${DEFAULT_SERVE_LIMITS.maxConnections}); at the cap the one waiting longest for\n` +
            "a request's headers is closed to make room, and a new one is refused only when none waits",
        },
        {
          name: "max-connections-per-address",
          type: "number",
          integer: true,
          min: 0,
          max: 1_000_000,
          value: "N",
          help:
            `open connections from one client address at most, 0 for no limit (default ${DEFAULT_SERVE_LIMITS.maxConnectionsPerAddress},\n` +
            "a quarter of --max-connections); behind a reverse proxy all clients share its address: raise it or give 0",
        },
        {
          ...PAGE_CAP,
          name: "page-size",
          help: "items of a list answer without a limit (default: every match, as upstream)",
          env: "AGL_STORE_PAGE_SIZE",
        },
        {
          ...PAGE_CAP,
          name: "max-page-size",
          help:
            "most items of one list answer, limit=-1 included (default: no cap); a page it cuts says so\n" +
            `("truncated_by"); also most rollouts one dequeue claims (default ${MAX_DEQUEUE_SIZE})`,
          env: "AGL_STORE_MAX_PAGE_SIZE",
        },
        {
          ...PAGE_CAP,
          name: "max-page-chars",
          help: "characters of JSON after which a list answer ends, after one item at least (default: no cap)",
          env: "AGL_STORE_MAX_PAGE_CHARS",
        },
        {
          name: "workers",
          type: "number",
          ...WORKERS_BOUNDS,
          value: "N",
          help:
            "serve with N processes on one port and one database (default 1; needs a file or libSQL server --db;\n" +
            "docs/server.md#several-worker-processes)",
          env: "AGL_STORE_WORKERS",
        },
        { name: "no-dashboard", type: "boolean", help: "do not serve the dashboard at / (docs/dashboard.md)" },
        {
          name: "test-clock",
          type: "boolean",
          hidden: true,
          help: "TEST-ONLY: a settable clock and a reset route (src/server/test-hooks.ts)",
        },
      ],
    },
  ],
  footer: "Running it safely (token, CORS, timeouts, limits): docs/server.md",
} as const satisfies CommandSpec;

export const STORE_USAGE = formatHelp(STORE_COMMAND);

type Env = (name: string) => string | undefined;
type ReadText = (path: string) => string;

const readTextFile: ReadText = (path) => platform.readTextFile(path);

/** `--token` or `--token-file` as given on the command line. */
type TokenFlag = { token: string; source: "--token" } | { path: string; source: "--token-file" };

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

export function parseStoreArgs(argv: readonly string[], env: Env = () => undefined, readFile: ReadText = readTextFile): StoreServerConfig {
  const { help, values: v } = parseFlags(STORE_COMMAND, argv);
  if (v.token !== undefined && v["token-file"] !== undefined) throw new UsageError("give --token or --token-file, not both");
  const envPort = env("AGL_SERVER_PORT");
  const envWorkers = env("AGL_STORE_WORKERS");
  let logLevel: StoreServerConfig["logLevel"] = "info";
  if (v["log-level"] !== undefined) {
    try {
      logLevel = parseLogLevel(v["log-level"]);
    } catch (e) {
      throw new UsageError((e as Error).message);
    }
  }
  const maxConnections = v["max-connections"] ?? DEFAULT_SERVE_LIMITS.maxConnections;
  const envPageCap = (name: string): number | null => {
    const raw = env(name);
    return raw ? parseNumber(name, raw, PAGE_CAP) : null;
  };
  const cfg: StoreServerConfig = {
    host: v.host ?? (env("AGL_SERVER_HOST") || DEFAULT_HOST),
    port: v.port ?? (envPort ? parseNumber("AGL_SERVER_PORT", envPort, PORT_BOUNDS) : DEFAULT_PORT),
    db: v.db ?? (env("AGL_STORE_DB") || DEFAULT_DB),
    token: null,
    tokenSource: null,
    corsOrigins: [...(v["cors-origin"] ?? [])],
    allowedHosts: parseAllowedHosts(v["allowed-host"]),
    logLevel,
    bodyLimitBytes: v["body-limit"] ?? DEFAULT_BODY_LIMIT,
    idempotency: {
      ttlSeconds: v["idempotency-ttl"] ?? DEFAULT_IDEMPOTENCY_TTL_SECONDS,
      maxKeys: v["idempotency-keys"] ?? DEFAULT_IDEMPOTENCY_MAX_KEYS,
      maxBytes: v["idempotency-bytes"] ?? DEFAULT_IDEMPOTENCY_MAX_BYTES,
    },
    limits: {
      headersTimeoutSeconds: v["headers-timeout"] ?? DEFAULT_SERVE_LIMITS.headersTimeoutSeconds,
      requestTimeoutSeconds: v["request-timeout"] ?? DEFAULT_SERVE_LIMITS.requestTimeoutSeconds,
      keepAliveTimeoutSeconds: v["keep-alive-timeout"] ?? DEFAULT_SERVE_LIMITS.keepAliveTimeoutSeconds,
      maxConnections,
      maxConnectionsPerAddress: v["max-connections-per-address"] ?? defaultPerAddressLimit(maxConnections),
    },
    pageSize: v["page-size"] ?? envPageCap("AGL_STORE_PAGE_SIZE"),
    maxPageSize: v["max-page-size"] ?? envPageCap("AGL_STORE_MAX_PAGE_SIZE"),
    maxPageChars: v["max-page-chars"] ?? envPageCap("AGL_STORE_MAX_PAGE_CHARS"),
    dashboard: v["no-dashboard"] !== true,
    workers: v.workers ?? (envWorkers ? parseNumber("AGL_STORE_WORKERS", envWorkers, WORKERS_BOUNDS) : 1),
    testClock: v["test-clock"] === true,
    help,
  };
  const tokenFlag: TokenFlag | null =
    v.token !== undefined
      ? { token: v.token, source: "--token" }
      : v["token-file"] !== undefined
        ? { path: v["token-file"], source: "--token-file" }
        : null;
  resolveToken(cfg, tokenFlag, env, readFile);
  if (cfg.pageSize !== null && cfg.maxPageSize !== null && cfg.pageSize > cfg.maxPageSize) {
    throw new UsageError(`--page-size (${cfg.pageSize}) must not exceed --max-page-size (${cfg.maxPageSize})`);
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
