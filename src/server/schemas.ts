/**
 * Request shapes of the `/v1/agl` routes: the JSON bodies Agent Lightning's client sends (docs/http-api.md).
 * Envelopes are strict: an unknown key is a 400 that names it, so a typo never silently becomes "not
 * given". Deep checks the store already does (span bodies, resources) are left to the
 * store, which raises the same ValidationError with issue paths.
 */
import { z } from "zod";
import {
  AttemptStatus,
  FilterLogic,
  RolloutConfig,
  RolloutMode,
  RolloutStatus,
  SortOrder,
  TaskInput,
  WorkerStatus,
} from "../types/index.ts";
import { JsonObject } from "../store/inputs.ts";

const Config = RolloutConfig.strict();

const page = {
  limit: z.number().int().optional(),
  offset: z.number().int().optional(),
  sort_by: z.string().nullable().optional(),
  sort_order: SortOrder.optional(),
};

const rolloutOptions = {
  mode: RolloutMode.nullable().optional(),
  resources_id: z.string().nullable().optional(),
  config: Config.nullable().optional(),
  metadata: JsonObject.nullable().optional(),
};

export const EnqueueBody = z.strictObject({
  rollouts: z.array(z.strictObject({ input: TaskInput, ...rolloutOptions })),
});

export const DequeueBody = z.strictObject({
  limit: z.number().int().default(1),
  worker_id: z.string().nullable().optional(),
});

export const StartRolloutBody = z.strictObject({ input: TaskInput, ...rolloutOptions, worker_id: z.string().nullable().optional() });

export const RolloutSearch = z.strictObject({
  ...page,
  status_in: z.array(RolloutStatus).nullable().optional(),
  rollout_id_in: z.array(z.string()).nullable().optional(),
  rollout_id_contains: z.string().nullable().optional(),
  mode_in: z.array(RolloutMode).nullable().optional(),
  filter_logic: FilterLogic.optional(),
  /** Deprecated upstream aliases. */
  status: z.array(RolloutStatus).nullable().optional(),
  rollout_ids: z.array(z.string()).nullable().optional(),
});

/** Update bodies: a key's presence decides set versus leave alone; `null` only where a field may be null. */
export const RolloutPatchBody = z.strictObject({
  input: z.unknown().optional(),
  mode: RolloutMode.nullable().optional(),
  resources_id: z.string().nullable().optional(),
  status: RolloutStatus.optional(),
  config: Config.optional(),
  metadata: JsonObject.nullable().optional(),
});

export const WorkerIdBody = z.strictObject({ worker_id: z.string().nullable().optional() });

export const AttemptSearch = z.strictObject(page);

export const AttemptPatchBody = z.strictObject({
  status: AttemptStatus.optional(),
  worker_id: z.string().optional(),
  last_heartbeat_time: z.number().optional(),
  metadata: JsonObject.optional(),
});

export const WorkerSearch = z.strictObject({
  ...page,
  status_in: z.array(WorkerStatus).nullable().optional(),
  worker_id_contains: z.string().nullable().optional(),
  filter_logic: FilterLogic.optional(),
});

export const WorkerUpdateBody = z.strictObject({ heartbeat_stats: JsonObject.optional() });

export const ResourcesSearch = z.strictObject({
  ...page,
  resources_id: z.string().nullable().optional(),
  resources_id_contains: z.string().nullable().optional(),
});

const optStr = z.string().nullable().optional();
export const SpanSearch = z.strictObject({
  ...page,
  rollout_id: z.string(),
  attempt_id: optStr,
  trace_id: optStr,
  trace_id_contains: optStr,
  span_id: optStr,
  span_id_contains: optStr,
  parent_id: optStr,
  parent_id_contains: optStr,
  name: optStr,
  name_contains: optStr,
  filter_logic: FilterLogic.optional(),
});

export const NextSequenceBody = z.strictObject({ rollout_id: z.string(), attempt_id: z.string() });

export const ManySequenceBody = z.strictObject({ pairs: z.array(z.tuple([z.string(), z.string()])) });

/** Spans are checked by the store (fast path, then zod with issue paths); only the envelope is checked here. */
export const SpanBatchBody = z.strictObject({ spans: z.array(z.unknown()) });

export const WaitBody = z.strictObject({
  rollout_ids: z.array(z.string()),
  timeout: z.number().nullable().optional(),
});

/** GET query parameters that repeat (`?status_in=a&status_in=b`) and those that are numbers. */
export const ARRAY_PARAMS = new Set(["status_in", "rollout_id_in", "mode_in", "status", "rollout_ids"]);
export const NUMBER_PARAMS = new Set(["limit", "offset"]);

/**
 * `POST /v1/agl/attempts/finish` (a Lightning extension): the end of an attempt in one request. The
 * envelope, the status patch and the claim are checked here, before anything is stored; spans are checked
 * by the store, as on `/spans/batch`.
 */
export const FinishAttemptBody = z.strictObject({
  rollout_id: z.string(),
  attempt_id: z.string(),
  spans: z.array(z.unknown()).optional(),
  attempt: AttemptPatchBody,
  claim: z.strictObject({ worker_id: z.string().nullable().optional() }).nullable().optional(),
});
