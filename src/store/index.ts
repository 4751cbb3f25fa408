export * from "./base.ts";
export * from "./core.ts";
export * from "./decisions.ts";
export * from "./memory.ts";
export * from "./memory-storage.ts";
export * from "./mutex.ts";
export * from "./otel-span.ts";
export * from "./query.ts";
export type * from "./storage.ts";
