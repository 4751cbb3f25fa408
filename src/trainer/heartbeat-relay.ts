/**
 * Worker heartbeats as attempt heartbeats, while a Trainer runs (docs/departures.md#21).
 *
 * The store judges an attempt unresponsive by its own `last_heartbeat_time`, which only span writes
 * set; a runner's heartbeats (`updateWorker`, every `heartbeatInterval`) stamp the worker. An agent
 * waiting minutes on a model call writes no span, so a rollout given an `unresponsive_seconds` would be
 * judged dead while its runner is alive. The relay copies a busy worker's last heartbeat onto the
 * attempt it is running: the attempt then goes silent only when its runner does.
 */
import type { LightningStore } from "../store/base.ts";
import { IN_FLIGHT_ATTEMPT_STATUSES } from "./in-flight.ts";

/**
 * The `unresponsive_seconds` the Trainer gives the rollouts it enqueues when runners send heartbeats
 * every `heartbeatInterval` seconds: six missed heartbeats, and never less than 30 s (a loaded machine
 * may delay a few).
 */
export function defaultUnresponsiveSeconds(heartbeatInterval: number): number | null {
  if (!(heartbeatInterval > 0) || !Number.isFinite(heartbeatInterval)) return null;
  return Math.max(30, 6 * heartbeatInterval);
}

const PAGE = 200;

/** One pass: stamps each busy worker's last heartbeat on its in-flight attempt when newer. Returns how many it stamped. */
export async function relayWorkerHeartbeats(store: LightningStore): Promise<number> {
  let stamped = 0;
  for (let offset = 0; ; offset += PAGE) {
    const page = await store.queryWorkers({ status_in: ["busy"], limit: PAGE, offset, sort_by: "worker_id" });
    for (const w of page.items) {
      if (w.current_rollout_id === null || w.current_attempt_id === null || w.last_heartbeat_time === null) continue;
      const attempt = await store.getLatestAttempt(w.current_rollout_id);
      if (attempt === null || attempt.attempt_id !== w.current_attempt_id || attempt.worker_id !== w.worker_id) continue;
      if (!IN_FLIGHT_ATTEMPT_STATUSES.includes(attempt.status)) continue;
      if (w.last_heartbeat_time <= (attempt.last_heartbeat_time ?? attempt.start_time)) continue;
      await store.updateAttempt(attempt.rollout_id, attempt.attempt_id, { last_heartbeat_time: w.last_heartbeat_time });
      stamped++;
    }
    if (page.items.length < PAGE || offset + PAGE >= page.total) return stamped;
  }
}
