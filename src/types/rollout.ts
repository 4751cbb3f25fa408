import { z } from "zod";
import { AttemptStatus, RolloutMode, RolloutStatus } from "./enums.ts";

/** Any JSON value, null included; the key itself is required. */
export const TaskInput = z.custom<unknown>((v) => v !== undefined, { message: "input is required (null is allowed)" });
export type TaskInput = unknown;

const JsonObject = z.record(z.string(), z.unknown());

export const RolloutConfig = z.object({
  timeout_seconds: z.number().nullable().default(null),
  unresponsive_seconds: z.number().nullable().default(null),
  max_attempts: z.number().int().min(1).default(1),
  retry_condition: z.array(AttemptStatus).default([]),
});
export type RolloutConfig = z.infer<typeof RolloutConfig>;
export type RolloutConfigInput = z.input<typeof RolloutConfig>;
export const defaultRolloutConfig = (): RolloutConfig => RolloutConfig.parse({});

export const Rollout = z.object({
  rollout_id: z.string(),
  input: TaskInput,
  start_time: z.number(),
  end_time: z.number().nullable().default(null),
  mode: RolloutMode.nullable().default(null),
  resources_id: z.string().nullable().default(null),
  status: RolloutStatus.default("queuing"),
  config: RolloutConfig.default(defaultRolloutConfig),
  metadata: JsonObject.nullable().default(null),
});
export type Rollout = z.infer<typeof Rollout>;

export const Attempt = z.object({
  rollout_id: z.string(),
  attempt_id: z.string(),
  sequence_id: z.number().int(),
  start_time: z.number(),
  end_time: z.number().nullable().default(null),
  status: AttemptStatus.default("preparing"),
  worker_id: z.string().nullable().default(null),
  last_heartbeat_time: z.number().nullable().default(null),
  metadata: JsonObject.nullable().default(null),
});
export type Attempt = z.infer<typeof Attempt>;

/** A rollout with its latest attempt. On the wire, a plain Rollout has no `attempt` key. */
export const AttemptedRollout = Rollout.extend({ attempt: Attempt }).refine((r) => r.attempt.rollout_id === r.rollout_id, {
  message: "attempt.rollout_id must equal rollout_id",
  path: ["attempt", "rollout_id"],
});
export type AttemptedRollout = Rollout & { attempt: Attempt };

export const isAttemptedRollout = (r: Rollout | AttemptedRollout): r is AttemptedRollout => (r as AttemptedRollout).attempt !== undefined;

/** Parses either shape: the presence of `attempt` decides. */
export const RolloutOrAttempted = z.union([AttemptedRollout, Rollout]);

export const EnqueueRolloutRequest = z.object({
  input: TaskInput,
  mode: RolloutMode.nullable().optional(),
  resources_id: z.string().nullable().optional(),
  config: RolloutConfig.nullable().optional(),
  metadata: JsonObject.nullable().optional(),
});
export type EnqueueRolloutRequest = z.input<typeof EnqueueRolloutRequest>;
