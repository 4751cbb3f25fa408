/**
 * Total system memory, for the in-memory store's eviction thresholds (upstream: psutil, else 8 GiB).
 * The platform (src/platform/) asks the runtime; where it cannot tell (browsers, Deno without
 * --allow-sys) the fallback applies.
 */
import { platform } from "../platform/index.ts";

export const FALLBACK_MEMORY_BYTES = 8 * 1024 ** 3;

export function systemMemoryBytes(): number {
  return platform.systemMemoryBytes(FALLBACK_MEMORY_BYTES);
}
