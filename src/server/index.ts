export * from "./app.ts";
export * from "./errors.ts";
export * from "./idempotency.ts";
export { consoleLogger, LOG_LEVELS, parseLogLevel, silentLogger, Logger, type LogLevel, type LogWriter } from "../platform/log.ts";
export * from "./metrics.ts";
export { MAX_DEQUEUE_SIZE, type PageCut } from "./paging.ts";
export * from "./spans.ts";
export { spansFromOtlp } from "./otlp/mapping.ts";
