/** A level-filtered logger writing to the console: every runtime has one, and tests can pass their own. */
export type LogLevel = "debug" | "info" | "warning" | "error";
export const LOG_LEVELS: readonly LogLevel[] = ["debug", "info", "warning", "error"];

export interface Logger {
  debug(msg: string): void;
  info(msg: string): void;
  warning(msg: string): void;
  error(msg: string): void;
}

/** Accepts upstream's spellings too (`INFO`, `WARN`, `WARNING`). */
export function parseLogLevel(v: string): LogLevel {
  const l = v.trim().toLowerCase();
  const level = l === "warn" ? "warning" : l;
  if (!(LOG_LEVELS as readonly string[]).includes(level)) {
    throw new Error(`--log-level must be one of ${LOG_LEVELS.join(", ")} (got ${JSON.stringify(v)})`);
  }
  return level as LogLevel;
}

export function consoleLogger(level: LogLevel = "info"): Logger {
  const min = LOG_LEVELS.indexOf(level);
  const at = (l: LogLevel, write: (m: string) => void) => (msg: string) => {
    if (LOG_LEVELS.indexOf(l) >= min) write(`[agl store] ${l.toUpperCase()} ${msg}`);
  };
  return {
    debug: at("debug", (m) => console.debug(m)),
    info: at("info", (m) => console.log(m)),
    warning: at("warning", (m) => console.warn(m)),
    error: at("error", (m) => console.error(m)),
  };
}

export const silentLogger: Logger = { debug() {}, info() {}, warning() {}, error() {} };
