/**
 * The one logger. Named loggers (`getLogger`) are shared by the tracer, runner, trainer and
 * algorithms: their records go to every sink (the console, filtered by `AGL_LOG_LEVEL`, default
 * warning; and test sinks such as `captureLogs`). The store server's logger (`consoleLogger`) writes
 * `[agl store] LEVEL message` lines with its own level (`--log-level`). Messages keep upstream's
 * wording so tests (and users grepping logs) can match fragments.
 * One level type, upstream's names; "warn" is accepted wherever a user gives a level.
 */
import { platform } from "./index.ts";

export type LogLevel = "debug" | "info" | "warning" | "error";
export const LOG_LEVELS: readonly LogLevel[] = ["debug", "info", "warning", "error"];

export interface LogRecord {
  level: LogLevel;
  logger: string;
  message: string;
  error?: unknown;
}
export type LogSink = (record: LogRecord) => void;

/** What a log is written through (the store server and its tests take any object of this shape). */
export interface LogWriter {
  debug(message: string, error?: unknown): void;
  info(message: string): void;
  warning(message: string, error?: unknown): void;
  error(message: string, error?: unknown): void;
}

const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warning: 30, error: 40 };

/** A level as a user writes it: any case, `warn` or `warning`. Throws naming `what` otherwise. */
export function parseLogLevel(v: string, what = "--log-level"): LogLevel {
  const l = v.trim().toLowerCase();
  const level = l === "warn" ? "warning" : l;
  if (!(LOG_LEVELS as readonly string[]).includes(level)) {
    throw new Error(`${what} must be one of ${LOG_LEVELS.join(", ")} (got ${JSON.stringify(v)})`);
  }
  return level as LogLevel;
}

function envLevel(): LogLevel {
  const raw = platform.env("AGL_LOG_LEVEL");
  try {
    return raw === undefined ? "warning" : parseLogLevel(raw, "AGL_LOG_LEVEL");
  } catch {
    // An unknown AGL_LOG_LEVEL keeps the default, as it always has: logging must not stop a program.
    return "warning";
  }
}

let threshold: LogLevel = envLevel();

/** Upstream's short console labels for named loggers (`[WARN] name: message`). */
const LABEL: Record<LogLevel, string> = { debug: "DEBUG", info: "INFO", warning: "WARN", error: "ERROR" };

const consoleSink: LogSink = (r) => {
  if (ORDER[r.level] < ORDER[threshold]) return;
  const line = `[${LABEL[r.level]}] ${r.logger}: ${r.message}`;
  const out = r.level === "error" ? console.error : r.level === "warning" ? console.warn : console.log;
  if (r.error !== undefined) out(line, r.error);
  else out(line);
};

let sinks: LogSink[] = [consoleSink];

/** The console threshold of named loggers (`warn` accepted for `warning`). */
export function setLogLevel(level: LogLevel | "warn"): void {
  threshold = parseLogLevel(level, "setLogLevel");
}

/** Adds a sink (every record of a named logger reaches it, whatever the level); returns a remover. */
export function addLogSink(sink: LogSink): () => void {
  sinks = [...sinks, sink];
  return () => {
    sinks = sinks.filter((s) => s !== sink);
  };
}

/** Collects every record until `stop()`; for tests. */
export function captureLogs(): { records: LogRecord[]; text(): string; stop(): void } {
  const records: LogRecord[] = [];
  const stop = addLogSink((r) => records.push(r));
  const line = (r: LogRecord) =>
    `${r.level} ${r.message}${r.error === undefined ? "" : ` | ${r.error instanceof Error ? `${r.error.name}: ${r.error.message}` : String(r.error)}`}`;
  return { records, text: () => records.map(line).join("\n"), stop };
}

/** Where a logger's records go, and whether one at a level would go anywhere. */
interface Route {
  write(record: LogRecord): void;
  enabled(level: LogLevel): boolean;
}

const toSinks: Route = {
  write: (record) => {
    for (const s of sinks) s(record);
  },
  enabled: (level) => ORDER[level] >= ORDER[threshold] || sinks.length > 1,
};

export class Logger implements LogWriter {
  constructor(
    readonly name: string,
    private readonly route: Route = toSinks,
  ) {}
  /** Whether a record at `level` goes anywhere: lets a hot path skip building a message nobody reads. */
  isEnabled(level: LogLevel | "warn"): boolean {
    return this.route.enabled(level === "warn" ? "warning" : level);
  }
  private emit(level: LogLevel, message: string, error?: unknown): void {
    this.route.write(error === undefined ? { level, logger: this.name, message } : { level, logger: this.name, message, error });
  }
  debug(message: string, error?: unknown): void {
    this.emit("debug", message, error);
  }
  info(message: string): void {
    this.emit("info", message);
  }
  warning(message: string, error?: unknown): void {
    this.emit("warning", message, error);
  }
  /** The same as `warning`. */
  warn(message: string, error?: unknown): void {
    this.emit("warning", message, error);
  }
  error(message: string, error?: unknown): void {
    this.emit("error", message, error);
  }
}

export const getLogger = (name: string): Logger => new Logger(name);

/**
 * The reason at the bottom of an error's `cause` chain, in a few words: its code (`ECONNREFUSED`) or
 * its message. Null when the error has no cause. ("fetch failed" alone does not say why.)
 */
export function rootCause(err: unknown): string | null {
  let e = err;
  for (let depth = 0; depth < 8 && e instanceof Error && e.cause instanceof Error; depth++) e = e.cause;
  if (e === err || !(e instanceof Error)) return null;
  const code = (e as { code?: unknown }).code;
  return typeof code === "string" && code !== "" ? code : e.message.replace(/\s+/g, " ").trim() || e.name;
}

/**
 * An error in one line: its class, its message and its root cause (`APIConnectionError: Connection
 * error. (ECONNREFUSED)`), for a log line at ERROR whose stack and fields go to DEBUG.
 */
export function errorLine(err: unknown): string {
  if (!(err instanceof Error)) return String(err).replace(/\s+/g, " ").trim();
  const ctor = (err as { constructor?: { name?: string } }).constructor?.name;
  const name = ctor && ctor !== "Error" ? ctor : err.name;
  const message = err.message.replace(/\s+/g, " ").trim();
  const cause = rootCause(err);
  return `${name}: ${message}${cause !== null && !message.includes(cause) ? ` (${cause})` : ""}`;
}

/** The store server's logger: `[agl store] LEVEL message` on the console from `level` up. */
export function consoleLogger(level: LogLevel | "warn" = "info"): Logger {
  const min = ORDER[parseLogLevel(level)];
  const write = (r: LogRecord) => {
    if (ORDER[r.level] < min) return;
    const line = `[agl store] ${r.level.toUpperCase()} ${r.message}`;
    if (r.level === "debug") console.debug(line);
    else if (r.level === "info") console.log(line);
    else if (r.level === "warning") console.warn(line);
    else console.error(line);
  };
  return new Logger("agl store", { write, enabled: (l) => ORDER[l] >= min });
}

/** A logger that writes nothing. */
export const silentLogger: Logger = new Logger("silent", { write: () => {}, enabled: () => false });
