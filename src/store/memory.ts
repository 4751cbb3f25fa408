/**
 * `InMemoryLightningStore`: the store semantics of `LightningStoreCore` over `MemoryStorage`, with span
 * memory eviction: past the eviction threshold, the spans of the oldest finished rollouts are dropped
 * until usage is at or below the safe threshold.
 */
import type { Span } from "../types/index.ts";
import { ValidationError } from "../types/index.ts";
import { LightningStoreCore, type LightningStoreCoreOptions } from "./core.ts";
import { MemoryStorage } from "./memory-storage.ts";
import { systemMemoryBytes } from "./system-memory.ts";
import { jsonSpanSize } from "./span-size.ts";

export { jsonSpanSize };

/**
 * A memory threshold: a ratio of the memory capacity or an absolute number of bytes (JS cannot tell
 * upstream's `0.5` float from its `150` int, so the kind is explicit).
 */
export type MemoryThreshold = { ratio: number } | { bytes: number };

export interface InMemoryLightningStoreOptions extends LightningStoreCoreOptions {
  /** Span bytes above which whole rollouts' spans are dropped, oldest first. Default: 70% of the capacity. */
  evictionMemoryThreshold?: MemoryThreshold | null;
  /** Eviction stops at or below this. Default: 80% of the eviction threshold. Must be below it. */
  safeMemoryThreshold?: MemoryThreshold | null;
  /** Bytes a span is counted as; negative results count as 0. Default: about the length of its JSON. */
  spanSizeEstimator?: (span: Span) => number;
  /** What ratios are taken of. Default: total system memory (8 GiB when unknown). */
  memoryCapacityBytes?: number;
}

export interface ResolvedThresholds {
  evictionBytes: number;
  safeBytes: number;
}

function thresholdBytes(t: MemoryThreshold, capacity: number, name: string, ratioMin: "open" | "closed"): number {
  if ("ratio" in t) {
    const r = t.ratio;
    const ok = typeof r === "number" && (ratioMin === "open" ? r > 0 : r >= 0) && r <= 1;
    if (!ok) {
      throw new ValidationError(`${name} ratio must be in ${ratioMin === "open" ? "(0, 1]" : "[0, 1]"}, got ${String(r)}`, [name, "ratio"]);
    }
    return Math.floor(capacity * r);
  }
  if ("bytes" in t) {
    const b = t.bytes;
    if (typeof b !== "number" || !Number.isInteger(b) || b < 0) {
      throw new ValidationError(`${name} bytes must be an integer >= 0, got ${String(b)}`, [name, "bytes"]);
    }
    return b;
  }
  throw new ValidationError(`${name} must be {ratio} or {bytes}`, [name]);
}

/** The eviction and safe thresholds in bytes; throws ValidationError when the safe threshold is not below the eviction one. */
export function resolveMemoryThresholds(
  capacity: number,
  eviction: MemoryThreshold | null | undefined,
  safe: MemoryThreshold | null | undefined,
): ResolvedThresholds {
  if (!(capacity > 0)) throw new ValidationError(`memory capacity must be > 0 bytes, got ${capacity}`, ["memoryCapacityBytes"]);
  const evictionBytes = Math.max(
    1,
    eviction ? thresholdBytes(eviction, capacity, "evictionMemoryThreshold", "open") : Math.floor(capacity * 0.7),
  );
  const safeBytes = safe ? thresholdBytes(safe, capacity, "safeMemoryThreshold", "closed") : Math.floor(evictionBytes * 0.8);
  if (safeBytes >= evictionBytes) {
    throw new ValidationError(`safeMemoryThreshold (${safeBytes} bytes) must be below evictionMemoryThreshold (${evictionBytes} bytes)`, [
      "safeMemoryThreshold",
    ]);
  }
  return { evictionBytes, safeBytes };
}

export class InMemoryLightningStore extends LightningStoreCore {
  constructor(options: InMemoryLightningStoreOptions = {}) {
    const capacity = options.memoryCapacityBytes ?? systemMemoryBytes();
    const { evictionBytes, safeBytes } = resolveMemoryThresholds(capacity, options.evictionMemoryThreshold, options.safeMemoryThreshold);
    const storage = new MemoryStorage({
      evictionThresholdBytes: evictionBytes,
      safeThresholdBytes: safeBytes,
      memoryCapacityBytes: capacity,
      spanSizeEstimator: options.spanSizeEstimator ?? jsonSpanSize,
    });
    super(storage, "InMemoryLightningStore", options, { thread_safe: false, async_safe: true, zero_copy: false, otlp_traces: false });
  }

  /**
   * Forgets the cached latest-resources id, so `getLatestResources` falls back to the largest
   * `update_time` (upstream tests clear this cache).
   */
  forgetLatestResourcesCache(): void {
    (this.storage as MemoryStorage).forgetLatestResources();
  }
}
