/**
 * The resources a runner hands its agent (the rollout's resources id, else the latest), fetched once per
 * resources id and reused while that is provably as fresh as a fetch would be (docs/departures.md#25).
 *
 * Over HTTP the fetch is a quarter of a rollout's requests, and in a training loop every rollout of a
 * batch names the same id. An id's content can still change (`updateResources` replaces it in place),
 * so a cached copy is used only when it was fetched after the rollout was created, in store time: the
 * entry remembers the start time of the attempt it was fetched for (the store stamps it at the claim,
 * and the fetch follows the claim), and serves a rollout whose `start_time` is strictly earlier. Every
 * update the algorithm made before creating a rollout is therefore in the copy that rollout gets,
 * which is the usual order (update the resources, then enqueue the batch). Only an in-place update
 * made while the rollout already waited in the queue may be missed, a race upstream's fetch at claim
 * time has too, just with a narrower window. Rollouts without a resources id (none existed when they
 * were created) always ask the store for the latest.
 */
import type { LightningStore } from "../store/base.ts";
import { ownedCopy } from "../store/owned.ts";
import type { AttemptedRollout, ResourcesUpdate } from "../types/index.ts";

interface Entry {
  update: ResourcesUpdate;
  /** Store time before which every change to this id is in `update`. */
  freshAsOf: number;
}

export class ResourcesCache {
  private entry: Entry | null = null;

  /** The resources for `rollout`, or null when the store has none under its id. */
  async get(store: LightningStore, rollout: AttemptedRollout): Promise<ResourcesUpdate | null> {
    const id = rollout.resources_id;
    if (!id) return store.getLatestResources();
    const hit = this.entry;
    if (hit !== null && hit.update.resources_id === id && hit.freshAsOf > rollout.start_time) return hit.update;
    const fetched = await store.getResourcesById(id);
    // Frozen, as the in-memory store hands them out: an agent cannot edit what the next rollout gets.
    const update = fetched === null ? null : ownedCopy(fetched, "resources");
    this.entry = update === null ? null : { update, freshAsOf: rollout.attempt.start_time };
    return update;
  }

  clear(): void {
    this.entry = null;
  }
}
