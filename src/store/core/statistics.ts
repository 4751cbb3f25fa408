/** The store's statistics: row counts, uptime and whatever the storage adds. */
import type { StoreStatistics } from "../../types/index.ts";
import type { CollectionName, Storage } from "../storage.ts";

export function storeStatistics(name: string, counts: Record<CollectionName, number>, uptime: number, storage: Storage): StoreStatistics {
  return {
    name,
    total_rollouts: counts.rollouts,
    total_attempts: counts.attempts,
    total_spans: counts.spans,
    total_resources: counts.resources,
    total_workers: counts.workers,
    uptime,
    ...storage.statistics?.(),
  };
}
