/**
 * `systemSnapshot()`: worker telemetry for heartbeats (docs/runner.md#heartbeats), read through the
 * platform (src/platform/). Fields that cannot be read are null.
 */
import { platform } from "../platform/index.ts";

export interface GpuInfo {
  gpu: string;
  util_pct: number | null;
  mem_used_mb: number | null;
  mem_total_mb: number | null;
  temp_c: number | null;
}

export function systemSnapshot(includeGpu = false): Record<string, unknown> {
  const snapshot = platform.systemSnapshot();
  // No portable GPU query exists without a vendor tool; the list is empty rather than guessed.
  if (includeGpu) snapshot.gpus = [] as GpuInfo[];
  return snapshot;
}
