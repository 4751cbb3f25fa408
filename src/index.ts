export * from "./types/index.ts";
export * from "./store/index.ts";
export * from "./client/index.ts";
export * from "./wasm/index.ts";
export * from "./adapter/index.ts";
export * from "./gpu/index.ts";
