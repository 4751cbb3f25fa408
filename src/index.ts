export * from "./types/index.ts";
export * from "./store/index.ts";
