export * from "../types/env.ts";
export * from "./interrupt.ts";
export * from "./registry.ts";
export * from "./cs.ts";
// Serving a fetch handler with limits lives in the platform (src/platform/); these names stay public here.
export {
  serveFetch,
  longestHoldSeconds,
  DEFAULT_SERVE_LIMITS,
  PortInUseError,
  type ServeLimits,
  type ServedApp,
  type ServeOptions,
} from "../platform/index.ts";
export * from "./shm.ts";
export * from "./spawn.ts";
export * from "./strategy.ts";
export * from "./trainer.ts";
