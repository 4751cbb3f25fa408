/**
 * The LightningStore contract. Method names are camelCase; every data key (options, patches, results)
 * is snake_case exactly as on the wire, so the HTTP client and server pass objects through unchanged.
 *
 * "Not given" (`undefined` / missing key) leaves a field alone; an explicit `null` sets it to null.
 */
import type {
  AttemptStatus,
  AttemptedRollout,
  EnqueueRolloutRequest,
  FilterLogic,
  NamedResourcesInput,
  PaginatedResult,
  RolloutConfigInput,
  RolloutMode,
  RolloutStatus,
  SortOrder,
  Span,
  StoreCapabilities,
  StoreStatistics,
  WorkerStatus,
} from "../types/index.ts";
import { Attempt, ResourcesUpdate, Rollout, Worker } from "../types/index.ts";

export interface RolloutOptions {
  mode?: RolloutMode | null;
  resources_id?: string | null;
  config?: RolloutConfigInput | null;
  metadata?: Record<string, unknown> | null;
}

export interface StartRolloutOptions extends RolloutOptions {
  worker_id?: string | null;
}

export interface PageOptions {
  /** -1 (default) means unlimited; 0 gives no items but the right total. */
  limit?: number;
  offset?: number;
  sort_by?: string | null;
  sort_order?: SortOrder;
}

export interface RolloutQuery extends PageOptions {
  status_in?: RolloutStatus[] | null;
  rollout_id_in?: string[] | null;
  rollout_id_contains?: string | null;
  /** Rollouts of these modes (`train`, `val`, `test`); a Lightning extension for the dashboard. */
  mode_in?: RolloutMode[] | null;
  filter_logic?: FilterLogic;
  /** Deprecated alias of `status_in`; `status_in` wins when both are given. */
  status?: RolloutStatus[] | null;
  /** Deprecated alias of `rollout_id_in`; `rollout_id_in` wins when both are given. */
  rollout_ids?: string[] | null;
}

export interface SpanQuery extends PageOptions {
  /** An attempt id, or "latest" for the rollout's latest attempt; all attempts when not given. */
  attempt_id?: string | null;
  trace_id?: string | null;
  trace_id_contains?: string | null;
  span_id?: string | null;
  span_id_contains?: string | null;
  parent_id?: string | null;
  parent_id_contains?: string | null;
  name?: string | null;
  name_contains?: string | null;
  filter_logic?: FilterLogic;
}

export interface ResourcesQuery extends PageOptions {
  resources_id?: string | null;
  resources_id_contains?: string | null;
}

export interface WorkerQuery extends PageOptions {
  status_in?: WorkerStatus[] | null;
  worker_id_contains?: string | null;
  filter_logic?: FilterLogic;
}

export interface RolloutPatch {
  input?: unknown;
  mode?: RolloutMode | null;
  resources_id?: string | null;
  status?: RolloutStatus;
  config?: RolloutConfigInput;
  /** Replaces the metadata; it is not merged. */
  metadata?: Record<string, unknown> | null;
}

export interface AttemptPatch {
  status?: AttemptStatus;
  worker_id?: string;
  last_heartbeat_time?: number;
  metadata?: Record<string, unknown>;
}

export interface WaitOptions {
  rollout_ids: string[];
  /** Seconds. `<= 0` checks once; `null`/not given waits without limit. */
  timeout?: number | null;
  /** Cancels a wait; the promise then rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** The parts of an OpenTelemetry SDK `ReadableSpan` that the store reads (structural, no SDK import). */
export interface OtelReadableSpanLike {
  name: string;
  spanContext(): { traceId: string; spanId: string; isRemote?: boolean; traceState?: { serialize(): string } };
  parentSpanContext?: { traceId: string; spanId: string } | undefined;
  /** SDK 1.x name of the parent span id. */
  parentSpanId?: string;
  status: { code: number; message?: string };
  attributes: Record<string, unknown>;
  events: { name: string; attributes?: Record<string, unknown>; time: [number, number] }[];
  links: { context: { traceId: string; spanId: string }; attributes?: Record<string, unknown> }[];
  startTime: [number, number];
  endTime: [number, number];
  resource: { attributes: Record<string, unknown>; schemaUrl?: string };
}

export interface LightningStore {
  readonly capabilities: StoreCapabilities;

  // Rollouts and the queue
  startRollout(input: unknown, options?: StartRolloutOptions): Promise<AttemptedRollout>;
  enqueueRollout(input: unknown, options?: RolloutOptions): Promise<Rollout>;
  enqueueManyRollouts(requests: EnqueueRolloutRequest[]): Promise<Rollout[]>;
  dequeueRollout(options?: { worker_id?: string | null }): Promise<AttemptedRollout | null>;
  dequeueManyRollouts(options?: { limit?: number; worker_id?: string | null }): Promise<AttemptedRollout[]>;
  startAttempt(rolloutId: string, options?: { worker_id?: string | null }): Promise<AttemptedRollout>;
  queryRollouts(query?: RolloutQuery): Promise<PaginatedResult<Rollout | AttemptedRollout>>;
  getRolloutById(rolloutId: string): Promise<Rollout | AttemptedRollout | null>;
  updateRollout(rolloutId: string, patch: RolloutPatch): Promise<Rollout>;
  waitForRollouts(options: WaitOptions): Promise<Rollout[]>;
  /**
   * Optional: calls `listener` each time a rollout is enqueued or requeued through this store object
   * (not by other processes); returns a remover. An idle runner listens before it dequeues, and waits
   * for the call (or its poll interval) instead of sleeping the whole interval.
   */
  onQueued?(listener: () => void): () => void;

  // Attempts
  queryAttempts(rolloutId: string, query?: PageOptions): Promise<PaginatedResult<Attempt>>;
  getLatestAttempt(rolloutId: string): Promise<Attempt | null>;
  updateAttempt(rolloutId: string, attemptId: string | "latest", patch: AttemptPatch): Promise<Attempt>;

  // Resources
  addResources(resources: NamedResourcesInput): Promise<ResourcesUpdate>;
  updateResources(resourcesId: string, resources: NamedResourcesInput): Promise<ResourcesUpdate>;
  getLatestResources(): Promise<ResourcesUpdate | null>;
  getResourcesById(resourcesId: string): Promise<ResourcesUpdate | null>;
  queryResources(query?: ResourcesQuery): Promise<PaginatedResult<ResourcesUpdate>>;

  // Spans
  getNextSpanSequenceId(rolloutId: string, attemptId: string): Promise<number>;
  getManySpanSequenceIds(pairs: readonly (readonly [rolloutId: string, attemptId: string])[]): Promise<number[]>;
  /** Stores one span; `null` when a span with the same (rollout, attempt, span_id) exists. */
  addSpan(span: Span): Promise<Span | null>;
  /** Stores many spans; returns those really inserted (duplicates are skipped). */
  addManySpans(spans: Span[]): Promise<Span[]>;
  addOtelSpan(rolloutId: string, attemptId: string, span: OtelReadableSpanLike, sequenceId?: number | null): Promise<Span | null>;
  querySpans(rolloutId: string, query?: SpanQuery): Promise<PaginatedResult<Span>>;

  // Workers
  updateWorker(workerId: string, heartbeatStats?: Record<string, unknown>): Promise<Worker>;
  getWorkerById(workerId: string): Promise<Worker | null>;
  queryWorkers(query?: WorkerQuery): Promise<PaginatedResult<Worker>>;

  statistics(): Promise<StoreStatistics>;
  /** Releases timers, connections and files. Safe to call twice. */
  close(): Promise<void>;
}

/** Model fields per collection, in the order of their schemas: `sort_by` must name one of them. */
export const ROLLOUT_FIELDS: readonly (keyof typeof Rollout.shape)[] = Rollout.keyof().options;
export const ATTEMPT_FIELDS: readonly (keyof typeof Attempt.shape)[] = Attempt.keyof().options;
export const RESOURCES_FIELDS: readonly (keyof typeof ResourcesUpdate.shape)[] = ResourcesUpdate.keyof().options;
export const WORKER_FIELDS: readonly (keyof typeof Worker.shape)[] = Worker.keyof().options;
