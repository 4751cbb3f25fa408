/**
 * The attempts a worker has in flight, found through the store, and failing them when the worker's
 * process is known to be dead (the client-server strategy saw it exit): the rollout's retry policy then
 * applies at once instead of the rollout staying `running` (docs/departures.md#21).
 *
 * A worker's in-flight attempts are the latest attempts of preparing or running rollouts whose
 * `worker_id` is the worker's label; worker labels must be unique per store (LitAgentRunner uses
 * `Worker-<index>`).
 */
import type { LightningStore } from "../store/base.ts";
import type { Attempt, AttemptStatus } from "../types/index.ts";
import { isAttemptedRollout } from "../types/index.ts";

/** Attempt statuses of an attempt that a live worker is still working on. */
export const IN_FLIGHT_ATTEMPT_STATUSES: readonly AttemptStatus[] = ["preparing", "running"];

const PAGE = 200;

/** The latest attempts of preparing/running rollouts that `workerId` holds and has not finished. */
export async function inFlightAttemptsOf(store: LightningStore, workerId: string): Promise<Attempt[]> {
  const found: Attempt[] = [];
  for (let offset = 0; ; offset += PAGE) {
    const page = await store.queryRollouts({ status_in: ["preparing", "running"], limit: PAGE, offset, sort_by: "rollout_id" });
    for (const r of page.items) {
      if (isAttemptedRollout(r) && r.attempt.worker_id === workerId && IN_FLIGHT_ATTEMPT_STATUSES.includes(r.attempt.status))
        found.push(r.attempt);
    }
    if (page.items.length < PAGE || offset + PAGE >= page.total) return found;
  }
}

/**
 * Marks every in-flight attempt of `workerId` failed (the store then requeues or fails its rollout per
 * the rollout's config) and returns the attempts as they were before.
 */
export async function failInFlightAttempts(store: LightningStore, workerId: string): Promise<Attempt[]> {
  const attempts = await inFlightAttemptsOf(store, workerId);
  for (const a of attempts) await store.updateAttempt(a.rollout_id, a.attempt_id, { status: "failed" });
  return attempts;
}
