export * from "./base.ts";
export * from "./baseline.ts";
export * from "./functional.ts";
