/**
 * Total system memory, for the in-memory store's eviction thresholds (upstream: psutil, else 8 GiB).
 * The one place that asks the runtime: Node and Bun through `process.getBuiltinModule("os")`,
 * Deno through `Deno.systemMemoryInfo()`; anything else (browsers) gets the fallback.
 */
export const FALLBACK_MEMORY_BYTES = 8 * 1024 ** 3;

export function systemMemoryBytes(): number {
  const g = globalThis as {
    process?: { getBuiltinModule?(id: string): { totalmem?(): number } | undefined };
    Deno?: { systemMemoryInfo?(): { total: number } };
  };
  try {
    const total = g.process?.getBuiltinModule?.("os")?.totalmem?.();
    if (typeof total === "number" && total > 0) return total;
  } catch {
    // Not available in this runtime: try the next source.
  }
  try {
    const total = g.Deno?.systemMemoryInfo?.().total;
    if (typeof total === "number" && total > 0) return total;
  } catch {
    // Deno without --allow-sys: fall back.
  }
  return FALLBACK_MEMORY_BYTES;
}
