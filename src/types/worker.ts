import { z } from "zod";
import { WorkerStatus } from "./enums.ts";

export const Worker = z.object({
  worker_id: z.string(),
  status: WorkerStatus.default("unknown"),
  heartbeat_stats: z.record(z.string(), z.unknown()).nullable().default(null),
  last_heartbeat_time: z.number().nullable().default(null),
  last_dequeue_time: z.number().nullable().default(null),
  last_busy_time: z.number().nullable().default(null),
  last_idle_time: z.number().nullable().default(null),
  current_rollout_id: z.string().nullable().default(null),
  current_attempt_id: z.string().nullable().default(null),
});
export type Worker = z.infer<typeof Worker>;

export const newWorker = (worker_id: string): Worker => Worker.parse({ worker_id });
