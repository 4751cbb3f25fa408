/**
 * Agent Lightning v0.3.0's pydantic models (agentlightning/types/core.py, tracer.py, resources.py and
 * the response models of store/client_server.py) as zod schemas, with pydantic's strictness (lax mode,
 * what `model_validate` does with parsed JSON):
 * - a field without a default is required: its key must be there (`Optional[X]` without a default
 *   still needs the key, with null allowed); a field with a default may be left out;
 * - `float` takes any JSON number, `int` only whole numbers, `str` only strings (no numbers), `bool`
 *   only booleans; `Literal` enums are exact;
 * - unknown keys are dropped (`extra="ignore"`, the default) or kept (`extra="allow"`): never an error.
 * One place is stricter than pydantic: numbers sent as strings (`"1.5"`), which lax mode would convert,
 * are refused, since a JSON server has no reason to send them.
 * These are what upstream's Python client runs on our answers, so a failure here is a Python client
 * failing against our server.
 */
import { z } from "zod";

/** `x: Optional[T] = None`: the key may be missing, the value may be null. */
const optional = <T extends z.ZodType>(t: T) => t.nullable().optional();
/** `x: Optional[T]` without a default: the key is required, the value may be null. */
const nullable = <T extends z.ZodType>(t: T) => t.nullable();

const Str = z.string();
const Int = z.number().int();
const Float = z.number();
const Bool = z.boolean();
/** `TaskInput = Any` without a default: any value, null included, but the key must be there. */
const Any = z.unknown();
const Dict = z.record(z.string(), z.unknown());

export const RolloutStatus = z.enum(["queuing", "preparing", "running", "failed", "succeeded", "cancelled", "requeuing"]);
export const AttemptStatus = z.enum(["preparing", "running", "failed", "succeeded", "unresponsive", "timeout"]);
export const RolloutMode = z.enum(["train", "val", "test"]);
export const WorkerStatus = z.enum(["idle", "busy", "unknown"]);
const StatusCode = z.enum(["UNSET", "OK", "ERROR"]);

export const RolloutConfig = z.object({
  timeout_seconds: optional(Float),
  unresponsive_seconds: optional(Float),
  max_attempts: Int.min(1).optional(),
  retry_condition: z.array(AttemptStatus).optional(),
});

export const Attempt = z.object({
  rollout_id: Str,
  attempt_id: Str,
  sequence_id: Int,
  start_time: Float,
  end_time: optional(Float),
  status: AttemptStatus.optional(),
  worker_id: optional(Str),
  last_heartbeat_time: optional(Float),
  metadata: optional(Dict),
});

const rolloutFields = {
  rollout_id: Str,
  input: Any,
  start_time: Float,
  end_time: optional(Float),
  mode: optional(RolloutMode),
  resources_id: optional(Str),
  status: RolloutStatus.optional(),
  config: RolloutConfig.optional(),
  metadata: optional(Dict),
};

export const Rollout = z.object(rolloutFields);

/** `AttemptedRollout(Rollout)` with its `check_consistency` validator. */
export const AttemptedRollout = z
  .object({ ...rolloutFields, attempt: Attempt })
  .refine((r) => r.attempt.rollout_id === r.rollout_id, { message: "Inconsistent rollout_id between Rollout and Attempt" });

/** A rollout item as the client reads it: `AttemptedRollout` when the key `attempt` is there, else `Rollout`. */
export const RolloutOrAttempted = z
  .unknown()
  .superRefine((v, ctx) => {
    const schema = v !== null && typeof v === "object" && "attempt" in v ? AttemptedRollout : Rollout;
    for (const issue of schema.safeParse(v).error?.issues ?? []) ctx.addIssue({ code: "custom", message: issue.message, path: issue.path });
  })
  .transform((v) => v as z.infer<typeof Rollout> & { attempt?: z.infer<typeof Attempt> });

export const Worker = z.object({
  worker_id: Str,
  status: WorkerStatus.optional(),
  heartbeat_stats: optional(Dict),
  last_heartbeat_time: optional(Float),
  last_dequeue_time: optional(Float),
  last_busy_time: optional(Float),
  last_idle_time: optional(Float),
  current_rollout_id: optional(Str),
  current_attempt_id: optional(Str),
});

// types/tracer.py

const AttributeValue = z.union([Str, Bool, Float, z.array(Str), z.array(Bool), z.array(Float)]);
const Attributes = z.record(z.string(), AttributeValue);

export const SpanContext = z.looseObject({ trace_id: Str, span_id: Str, is_remote: Bool, trace_state: z.record(z.string(), Str) });
export const TraceStatus = z.looseObject({ status_code: StatusCode, description: optional(Str) });
export const Event = z.looseObject({ name: Str, attributes: Attributes, timestamp: optional(Float) });
export const Link = z.looseObject({ context: SpanContext, attributes: optional(Attributes) });
export const OtelResource = z.object({ attributes: Attributes, schema_url: Str });

/** `Span` keeps unknown keys (`extra="allow"`). */
export const Span = z.looseObject({
  rollout_id: Str,
  attempt_id: Str,
  sequence_id: Int,
  trace_id: Str,
  span_id: Str,
  parent_id: nullable(Str),
  name: Str,
  status: TraceStatus,
  attributes: Attributes,
  events: z.array(Event),
  links: z.array(Link),
  start_time: nullable(Float),
  end_time: nullable(Float),
  context: nullable(SpanContext),
  parent: nullable(SpanContext),
  resource: OtelResource,
});

// types/resources.py: a union discriminated by `resource_type` (which the union needs, defaults aside)

const llmFields = { endpoint: Str, model: Str, api_key: optional(Str), sampling_parameters: Dict.optional() };
const ResourceUnion = z.discriminatedUnion("resource_type", [
  z.object({ resource_type: z.literal("llm"), ...llmFields }),
  z.object({ resource_type: z.literal("proxy_llm"), ...llmFields }),
  z.object({ resource_type: z.literal("prompt_template"), template: Str, engine: z.enum(["jinja", "f-string", "poml"]) }),
]);
export const NamedResources = z.record(z.string(), ResourceUnion);

export const ResourcesUpdate = z.object({
  resources_id: Str,
  create_time: Float,
  update_time: Float,
  version: Int,
  resources: NamedResources,
});

// store/client_server.py and store/base.py

/** `PaginatedResult[T]`: the client reads `items`, `limit`, `offset` and `total`, all required. */
export const PaginatedResult = <T extends z.ZodType>(item: T) => z.object({ items: z.array(item), limit: Int, offset: Int, total: Int });

export const NextSequenceIdResponse = z.object({ sequence_id: Int });

/** `LightningStoreStatistics` is a TypedDict (`total=False`) that the client only casts; these are its keys. */
export const Statistics = z.looseObject({
  name: Str.optional(),
  total_rollouts: Int.optional(),
  total_attempts: Int.optional(),
  total_spans: Int.optional(),
  total_resources: Int.optional(),
  total_workers: Int.optional(),
  uptime: Float.optional(),
});

export const Health = z.object({ status: z.literal("ok") });
