/**
 * A tiny leveled logger shared by the tracer, runner, trainer and algorithms. Messages keep upstream's
 * wording so tests (and users grepping logs) can match fragments. The sink is replaceable so tests can
 * capture lines; the level comes from `AGL_LOG_LEVEL` (debug, info, warn, error; default warn).
 */
export type LogLevel = "debug" | "info" | "warn" | "error";
export interface LogRecord {
  level: LogLevel;
  logger: string;
  message: string;
  error?: unknown;
}
export type LogSink = (record: LogRecord) => void;

const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

function envLevel(): LogLevel {
  const raw = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env?.AGL_LOG_LEVEL;
  const v = raw?.trim().toLowerCase();
  if (v === "warning") return "warn";
  return v === "debug" || v === "info" || v === "warn" || v === "error" ? v : "warn";
}

let threshold: LogLevel = envLevel();

const consoleSink: LogSink = (r) => {
  if (ORDER[r.level] < ORDER[threshold]) return;
  const line = `[${r.level.toUpperCase()}] ${r.logger}: ${r.message}`;
  const out = r.level === "error" ? console.error : r.level === "warn" ? console.warn : console.log;
  if (r.error !== undefined) out(line, r.error);
  else out(line);
};

let sinks: LogSink[] = [consoleSink];

export function setLogLevel(level: LogLevel): void {
  threshold = level;
}

/** Adds a sink (every record reaches it, whatever the level); returns a remover. */
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
  const line = (r: LogRecord) => `${r.level} ${r.message}${r.error === undefined ? "" : ` | ${r.error instanceof Error ? `${r.error.name}: ${r.error.message}` : String(r.error)}`}`;
  return { records, text: () => records.map(line).join("\n"), stop };
}

export class Logger {
  constructor(readonly name: string) {}
  /** Whether a record at `level` goes anywhere: lets a hot path skip building a message nobody reads. */
  isEnabled(level: LogLevel): boolean {
    return ORDER[level] >= ORDER[threshold] || sinks.length > 1;
  }
  private emit(level: LogLevel, message: string, error?: unknown): void {
    const record: LogRecord = error === undefined ? { level, logger: this.name, message } : { level, logger: this.name, message, error };
    for (const s of sinks) s(record);
  }
  debug(message: string): void {
    this.emit("debug", message);
  }
  info(message: string): void {
    this.emit("info", message);
  }
  warn(message: string, error?: unknown): void {
    this.emit("warn", message, error);
  }
  error(message: string, error?: unknown): void {
    this.emit("error", message, error);
  }
}

export const getLogger = (name: string): Logger => new Logger(name);
