export * from "./client.ts";
export * from "./errors.ts";
export * from "./finish.ts";
