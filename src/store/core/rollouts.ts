/**
 * Transaction bodies of rollouts, the queue and attempts (`this` is the store's `TxContext`; bodies are
 * generator functions rather than closures: a generator closure per call would cost a new hidden class).
 */
import type { Attempt, AttemptedRollout, FilterLogic, PaginatedResult, Rollout } from "../../types/index.ts";
import { ConflictError, NotFoundError, isQueuing } from "../../types/index.ts";
import type { AttemptPatch, RolloutPatch } from "../base.ts";
import { workerPatchForAttempt, workerPatchForEmptyDequeue } from "../decisions.ts";
import type { Page, RolloutDraft } from "../inputs.ts";
import type { FieldOps } from "../query.ts";
import type { RolloutPatchRow, StorageTx } from "../storage.ts";
import type { Effects, TxBody, TxContext } from "./driver.ts";
import { applyAttemptPatch, found, latestResourcesId, newAttempt, newRollout, setRolloutStatus, withAttempt } from "./steps.ts";

export function* startRolloutTx(this: TxContext, t: StorageTx, draft: RolloutDraft): TxBody<AttemptedRollout> {
  const now = this.clock.now();
  const rollout = newRollout(draft, "preparing", now, draft.resources_id ?? (yield* latestResourcesId(t)));
  const attempt = newAttempt(rollout.rollout_id, 1, draft.worker_id, now);
  yield t.insertRollouts([rollout]);
  yield t.insertAttempt(attempt);
  if (draft.worker_id) yield t.upsertWorker(draft.worker_id, workerPatchForAttempt(attempt, now));
  return withAttempt(rollout, attempt);
}

export function* enqueueTx(this: TxContext, t: StorageTx, drafts: RolloutDraft[]): TxBody<Rollout[]> {
  const now = this.clock.now();
  const latest = drafts.some((d) => d.resources_id === null) ? yield* latestResourcesId(t) : null;
  const rollouts = drafts.map((d) => newRollout(d, "queuing", now, latest));
  yield t.insertRollouts(rollouts);
  yield t.pushQueue(rollouts.map((r) => r.rollout_id));
  return rollouts;
}

export function* dequeueTx(this: TxContext, t: StorageTx, limit: number, workerId: string | null): TxBody<AttemptedRollout[]> {
  const now = this.clock.now();
  const claimed: AttemptedRollout[] = [];
  while (claimed.length < limit) {
    const ids: string[] = yield t.popQueue(limit - claimed.length);
    if (ids.length === 0) break;
    for (const id of ids) {
      const rollout: Rollout | null = yield t.getRollout(id);
      // Changed while it waited (cancelled, finished, started by hand): drop the queue entry.
      if (!rollout || !isQueuing(rollout.status)) continue;
      const count: number = yield t.countAttempts(id);
      const attempt = newAttempt(id, count + 1, workerId, now);
      yield t.insertAttempt(attempt);
      const updated: Rollout = yield t.updateRollout(id, { status: "preparing" });
      claimed.push(withAttempt(updated, attempt));
    }
  }
  if (workerId) {
    const last = claimed[claimed.length - 1];
    if (last) yield t.upsertWorker(workerId, workerPatchForAttempt(last.attempt, now, true));
    else yield t.upsertWorker(workerId, workerPatchForEmptyDequeue(yield t.getWorker(workerId), now));
  }
  return claimed;
}

export function* startAttemptTx(
  this: TxContext,
  t: StorageTx,
  rolloutId: string,
  workerId: string | null,
  fx: Effects,
): TxBody<AttemptedRollout> {
  const rollout = found(yield t.getRollout(rolloutId), rolloutId);
  const now = this.clock.now();
  // max_attempts does not limit manual attempts (upstream MUST).
  const count: number = yield t.countAttempts(rolloutId);
  const attempt = newAttempt(rolloutId, count + 1, workerId, now);
  yield t.insertAttempt(attempt);
  const updated = yield* setRolloutStatus(t, rollout, "preparing", now, fx);
  if (workerId) yield t.upsertWorker(workerId, workerPatchForAttempt(attempt, now));
  return withAttempt(updated, attempt);
}

export function* queryRolloutsTx(
  this: TxContext,
  t: StorageTx,
  where: Record<string, FieldOps>,
  logic: FilterLogic,
  page: Page,
): TxBody<PaginatedResult<Rollout | AttemptedRollout>> {
  const result: PaginatedResult<Rollout> = yield t.query("rollouts", { where, logic, ...page });
  const latest: Map<string, Attempt> = yield t.getLatestAttempts(result.items.map((r) => r.rollout_id));
  const items = result.items.map((r) => {
    const a = latest.get(r.rollout_id);
    return a ? withAttempt(r, a) : r;
  });
  return { ...result, items };
}

export function* getRolloutByIdTx(this: TxContext, t: StorageTx, rolloutId: string): TxBody<Rollout | AttemptedRollout | null> {
  const r: Rollout | null = yield t.getRollout(rolloutId);
  if (!r) return null;
  const a: Attempt | null = yield t.getLatestAttempt(rolloutId);
  return a ? withAttempt(r, a) : r;
}

export function* updateRolloutTx(this: TxContext, t: StorageTx, rolloutId: string, p: RolloutPatch, fx: Effects): TxBody<Rollout> {
  const rollout: Rollout | null = yield t.getRollout(rolloutId);
  if (!rollout) {
    throw new NotFoundError(
      `Rollout ${rolloutId} not found (Item does not exist with primary key(s): rollout_id='${rolloutId}')`,
      "rollout",
      rolloutId,
    );
  }
  const row: RolloutPatchRow = {};
  if (p.input !== undefined) row.input = p.input;
  if (p.mode !== undefined) row.mode = p.mode;
  if (p.resources_id !== undefined) row.resources_id = p.resources_id;
  if (p.config !== undefined) row.config = p.config as Rollout["config"];
  if (p.metadata !== undefined) row.metadata = p.metadata;
  if (p.status === undefined) return (yield t.updateRollout(rolloutId, row)) as Rollout;
  return yield* setRolloutStatus(t, rollout, p.status, this.clock.now(), fx, row);
}

export function* getRolloutsTx(this: TxContext, t: StorageTx, ids: readonly string[]): TxBody<(Rollout | null)[]> {
  const rows: (Rollout | null)[] = [];
  for (const id of ids) rows.push(yield t.getRollout(id));
  return rows;
}

export function* updateAttemptTx(
  this: TxContext,
  t: StorageTx,
  rolloutId: string,
  attemptId: string,
  p: AttemptPatch,
  fx: Effects,
): TxBody<Attempt> {
  const rollout = found(yield t.getRollout(rolloutId), rolloutId);
  const latest: Attempt | null = yield t.getLatestAttempt(rolloutId);
  if (!latest) throw new NotFoundError(`No attempts found for rollout ${rolloutId}`, "attempt", attemptId);
  const attempt: Attempt | null =
    attemptId === "latest" || attemptId === latest.attempt_id ? latest : yield t.getAttempt(rolloutId, attemptId);
  if (!attempt) throw new NotFoundError(`Attempt ${attemptId} not found for rollout ${rolloutId}`, "attempt", attemptId);
  if (p.status === "preparing" && attempt.status !== "preparing") {
    throw new ConflictError(
      `Attempt ${attempt.attempt_id} of rollout ${rolloutId} is ${attempt.status} and cannot go back to preparing; start a new attempt instead`,
    );
  }
  return yield* applyAttemptPatch(t, rollout, attempt, p, this.clock.now(), fx);
}
