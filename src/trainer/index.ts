export * from "./env.ts";
export * from "./interrupt.ts";
export * from "./registry.ts";
export * from "./shm.ts";
export * from "./strategy.ts";
export * from "./trainer.ts";
