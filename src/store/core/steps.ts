/** Write steps shared by several transaction bodies (always run inside a transaction). */
import type { Attempt, AttemptedRollout, ResourcesUpdate, Rollout, RolloutStatus } from "../../types/index.ts";
import { NotFoundError, isQueuing, isTerminal, newAttemptId, newRolloutId } from "../../types/index.ts";
import type { AttemptPatch } from "../base.ts";
import { attemptStatusEnds, rolloutStatusFromAttempt, workerPatchForAttempt } from "../decisions.ts";
import type { RolloutDraft } from "../inputs.ts";
import type { AttemptPatchRow, RolloutPatchRow, StorageTx } from "../storage.ts";
import type { Effects, TxBody } from "./driver.ts";

export const withAttempt = (rollout: Rollout, attempt: Attempt): AttemptedRollout => Object.freeze({ ...rollout, attempt });

/** The rollout just read (`yield t.getRollout(id)`), or NotFoundError. */
export function found(r: Rollout | null, rolloutId: string): Rollout {
  if (!r) throw new NotFoundError(`Rollout ${rolloutId} not found`, "rollout", rolloutId);
  return r;
}

export function newRollout(d: RolloutDraft, status: RolloutStatus, now: number, latestResources: string | null): Rollout {
  return {
    rollout_id: newRolloutId(),
    input: d.input,
    start_time: now,
    end_time: null,
    mode: d.mode,
    resources_id: d.resources_id ?? latestResources,
    status,
    config: d.config,
    metadata: d.metadata,
  };
}

export function newAttempt(rolloutId: string, sequenceId: number, workerId: string | null, now: number): Attempt {
  return {
    rollout_id: rolloutId,
    attempt_id: newAttemptId(),
    sequence_id: sequenceId,
    start_time: now,
    end_time: null,
    status: "preparing",
    worker_id: workerId,
    last_heartbeat_time: null,
    metadata: null,
  };
}

export function* latestResourcesId(t: StorageTx): TxBody<string | null> {
  const r: ResourcesUpdate | null = yield t.getLatestResources();
  return r?.resources_id ?? null;
}

/**
 * Writes a new rollout status (with `end_time` rules) and runs the post-update hook: a queuing status
 * puts the rollout back in the queue (once), a finished status wakes waiters after commit.
 */
export function* setRolloutStatus(
  t: StorageTx,
  rollout: Rollout,
  status: RolloutStatus,
  now: number,
  fx: Effects,
  extra?: RolloutPatchRow,
): TxBody<Rollout> {
  const patch: RolloutPatchRow = extra === undefined ? { status } : { ...extra, status };
  if (isTerminal(status)) patch.end_time = now;
  else if (rollout.end_time !== null) patch.end_time = null;
  const updated: Rollout = yield t.updateRollout(rollout.rollout_id, patch);
  if (isQueuing(status) && !(yield t.queueHas(rollout.rollout_id))) {
    yield t.pushQueue([rollout.rollout_id]);
    fx.queued = true;
  }
  if (isTerminal(status)) fx.finished.push(rollout.rollout_id);
  return updated;
}

/** An attempt's patch, then its rollout's status and its worker's fields: shared by updateAttempt and the watchdog. */
export function* applyAttemptPatch(
  t: StorageTx,
  rollout: Rollout,
  attempt: Attempt,
  patch: AttemptPatch,
  now: number,
  fx: Effects,
): TxBody<Attempt> {
  const row: AttemptPatchRow = {};
  let sync = false;
  if (patch.worker_id !== undefined) {
    row.worker_id = patch.worker_id;
    if (patch.worker_id) sync = true;
  }
  if (patch.status !== undefined) {
    row.status = patch.status;
    if (attemptStatusEnds(patch.status)) row.end_time = now;
    if (row.worker_id ?? attempt.worker_id) sync = true;
  }
  if (patch.last_heartbeat_time !== undefined) row.last_heartbeat_time = patch.last_heartbeat_time;
  if (patch.metadata !== undefined) row.metadata = patch.metadata;
  const updated: Attempt = yield t.updateAttempt(attempt.rollout_id, attempt.attempt_id, row);
  if (patch.status !== undefined && rollout.status !== "cancelled") {
    const latest: Attempt | null = yield t.getLatestAttempt(rollout.rollout_id);
    if (latest?.attempt_id === attempt.attempt_id) {
      const derived = rolloutStatusFromAttempt(updated, rollout.config);
      if (derived !== rollout.status) yield* setRolloutStatus(t, rollout, derived, now, fx);
    }
  }
  if (sync && updated.worker_id) yield t.upsertWorker(updated.worker_id, workerPatchForAttempt(updated, now));
  return updated;
}
