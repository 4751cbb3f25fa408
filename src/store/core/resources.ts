/** Transaction bodies of resources and the worker heartbeat. */
import type { NamedResources, ResourcesUpdate, Worker } from "../../types/index.ts";
import { newResourcesId } from "../../types/index.ts";
import type { MaybePromise, StorageTx } from "../storage.ts";
import type { TxBody, TxContext } from "./driver.ts";

export function* addResourcesTx(this: TxContext, t: StorageTx, parsed: NamedResources): TxBody<ResourcesUpdate> {
  const now = this.clock.now();
  const row: ResourcesUpdate = { resources_id: newResourcesId(), create_time: now, update_time: now, version: 1, resources: parsed };
  yield t.putResources(row);
  return row;
}

export function* updateResourcesTx(this: TxContext, t: StorageTx, resourcesId: string, parsed: NamedResources): TxBody<ResourcesUpdate> {
  const now = this.clock.now();
  const old: ResourcesUpdate | null = yield t.getResources(resourcesId);
  const row: ResourcesUpdate = old
    ? { ...old, update_time: now, version: old.version + 1, resources: parsed }
    : { resources_id: resourcesId, create_time: now, update_time: now, version: 1, resources: parsed };
  yield t.putResources(row);
  return row;
}

/** A worker's heartbeat at `now`, with its stats when it sent some. */
export function upsertWorkerHeartbeat(
  t: StorageTx,
  workerId: string,
  now: number,
  stats: Record<string, unknown> | undefined,
): MaybePromise<Worker> {
  return t.upsertWorker(
    workerId,
    stats === undefined ? { last_heartbeat_time: now } : { last_heartbeat_time: now, heartbeat_stats: stats },
  );
}
