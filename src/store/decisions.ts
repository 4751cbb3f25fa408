/**
 * Pure decision rules of the store (a rollout's status from its latest attempt, retries, the watchdog's verdicts), shared by every backend and by tests.
 * No I/O and no clock here: callers pass `now`.
 */
import type { Attempt, AttemptStatus, Rollout, RolloutConfig, RolloutStatus, Worker } from "../types/index.ts";
import { ValidationError } from "../types/index.ts";

/**
 * The rollout status implied by its latest attempt. A failed/timeout/unresponsive attempt asks
 * for a retry only when its status is in `retry_condition` and attempts are left.
 */
export function rolloutStatusFromAttempt(
  attempt: Pick<Attempt, "status" | "sequence_id">,
  config: Pick<RolloutConfig, "retry_condition" | "max_attempts">,
): RolloutStatus {
  switch (attempt.status) {
    case "preparing":
    case "running":
    case "succeeded":
      return attempt.status;
    case "failed":
    case "timeout":
    case "unresponsive":
      return config.retry_condition.includes(attempt.status) && attempt.sequence_id < config.max_attempts ? "requeuing" : "failed";
    default:
      throw new ValidationError(`Invalid attempt status: ${String(attempt.status)}`, ["status"]);
  }
}

/**
 * What the watchdog decides for a rollout's latest attempt at time `now`.
 * Timeout is measured from the attempt's start; unresponsiveness from its last heartbeat, or from
 * its start when it never sent one. All comparisons are strict. Written as `now > start + limit` (not
 * `now - start > limit`): the same sums as `watchdogDeadline`, so a deadline before `now` and a verdict
 * agree to the last bit, and a storage can find due rollouts by comparing stored deadlines alone.
 */
export function watchdogVerdict(
  attempt: Pick<Attempt, "start_time" | "last_heartbeat_time">,
  config: Pick<RolloutConfig, "timeout_seconds" | "unresponsive_seconds">,
  now: number,
): "timeout" | "unresponsive" | null {
  if (config.timeout_seconds !== null && now > attempt.start_time + config.timeout_seconds) return "timeout";
  if (config.unresponsive_seconds !== null && now > (attempt.last_heartbeat_time ?? attempt.start_time) + config.unresponsive_seconds) {
    return "unresponsive";
  }
  return null;
}

/** Rollout statuses the watchdog looks at, and the attempt statuses it may change. */
const watchedRollout = (s: RolloutStatus): boolean => s === "preparing" || s === "running";
const watchedAttempt = (s: AttemptStatus): boolean => s === "preparing" || s === "running" || s === "unresponsive";

/**
 * The watchdog's verdict as a time: it changes a rollout exactly when `now` is past this deadline (strictly),
 * and never while it is null. Null unless the rollout is preparing/running and its latest attempt is
 * preparing, running or unresponsive with a limit configured; an unresponsive attempt can only still
 * time out. It depends on the rollout's status and config and on the latest attempt's status, start
 * and heartbeat, so a storage keeps it current on every write of those and indexes it (storage.ts
 * `listDueRollouts`): a scan then reads only the rollouts that are due.
 */
export function watchdogDeadline(
  rollout: Pick<Rollout, "status" | "config">,
  latest: Pick<Attempt, "status" | "start_time" | "last_heartbeat_time"> | null,
): number | null {
  if (latest === null || !watchedRollout(rollout.status) || !watchedAttempt(latest.status)) return null;
  const { timeout_seconds: timeout, unresponsive_seconds: unresponsive } = rollout.config;
  const byTimeout = timeout === null ? null : latest.start_time + timeout;
  // An unresponsive attempt judged unresponsive again changes nothing.
  const bySilence =
    unresponsive === null || latest.status === "unresponsive" ? null : (latest.last_heartbeat_time ?? latest.start_time) + unresponsive;
  if (byTimeout === null) return bySilence;
  return bySilence === null ? byTimeout : Math.min(byTimeout, bySilence);
}

/**
 * The worker fields to upsert after an attempt changed. Only these keys are written, so the
 * worker's heartbeat fields survive. `dequeued` adds `last_dequeue_time`.
 */
export function workerPatchForAttempt(
  attempt: Pick<Attempt, "status" | "rollout_id" | "attempt_id">,
  now: number,
  dequeued = false,
): Partial<Worker> {
  let patch: Partial<Worker>;
  switch (attempt.status) {
    case "succeeded":
    case "failed":
      patch = { status: "idle", last_idle_time: now, current_rollout_id: null, current_attempt_id: null };
      break;
    case "timeout":
    case "unresponsive":
      patch = { status: "unknown", last_idle_time: now, current_rollout_id: null, current_attempt_id: null };
      break;
    default:
      patch = { status: "busy", last_busy_time: now, current_rollout_id: attempt.rollout_id, current_attempt_id: attempt.attempt_id };
  }
  if (dequeued) patch.last_dequeue_time = now;
  return patch;
}

/**
 * A dequeue that found nothing marks the worker idle. An already idle worker only gets
 * `last_dequeue_time`, so its `last_idle_time` keeps saying when it became idle.
 */
export function workerPatchForEmptyDequeue(current: Pick<Worker, "status"> | null, now: number): Partial<Worker> {
  return current?.status === "idle" ? { last_dequeue_time: now } : { status: "idle", last_idle_time: now, last_dequeue_time: now };
}

/**
 * The attempt fields a span arrival writes (heartbeat, and `running` when it was preparing or
 * unresponsive). Other statuses, finished ones included, are kept.
 */
export function heartbeatPatch(
  attempt: Pick<Attempt, "status">,
  now: number,
): Pick<Attempt, "last_heartbeat_time"> & { status?: AttemptStatus } {
  return attempt.status === "preparing" || attempt.status === "unresponsive"
    ? { last_heartbeat_time: now, status: "running" }
    : { last_heartbeat_time: now };
}

/**
 * docs/departures.md#4: the rollout becomes `running` when a span reaches its latest attempt
 * while the rollout waits (queuing, requeuing) or prepares. Deviation from upstream: only when that
 * attempt is itself running after the heartbeat, so a span that arrives late for a timed-out or
 * finished attempt does not revive a rollout that is waiting for its retry.
 */
export function rolloutStatusAfterSpan(
  rolloutStatus: RolloutStatus,
  attemptStatusAfterHeartbeat: AttemptStatus,
  isLatest: boolean,
): RolloutStatus | null {
  if (!isLatest || attemptStatusAfterHeartbeat !== "running") return null;
  return rolloutStatus === "preparing" || rolloutStatus === "requeuing" || rolloutStatus === "queuing" ? "running" : null;
}

/**
 * The largest explicit span sequence id that raises a rollout's counter: 2^52 (docs/departures.md#55).
 * A span with a larger id is stored with it, but the counter stops here, so the ids handed out after it
 * stay exact integers for 2^52 more calls: a client-supplied id cannot exhaust or stall the numbering.
 */
export const MAX_COUNTED_SEQUENCE_ID = 2 ** 52;

/** What an explicit sequence id raises its rollout's counter to (the counter takes the max with it). */
export const countedSequenceId = (sequenceId: number): number => Math.min(sequenceId, MAX_COUNTED_SEQUENCE_ID);

/** Attempt statuses that write `end_time` (timeout and unresponsive do not, as upstream). */
export const attemptStatusEnds = (s: AttemptStatus): boolean => s === "succeeded" || s === "failed";
