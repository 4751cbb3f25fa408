/**
 * How each collection's model rows map to the SQL tables of schema.ts: the column list (taken from the
 * drizzle schema, so SQL and schema cannot drift apart), which columns hold JSON, and the converters
 * between a model object and a positional SQL row. Every converter builds fresh objects, so rows handed
 * to the core are never shared with anything the storage keeps.
 */
import { getTableColumns } from "drizzle-orm";
import type { SQLiteTable } from "drizzle-orm/sqlite-core";
import type { Attempt, ResourcesUpdate, Rollout, Span, Worker } from "../../types/index.ts";
import { ValidationError } from "../../types/index.ts";
import type { CollectionName, Rows } from "../storage.ts";
import type { SqlRow, SqlValue } from "./driver.ts";
import * as schema from "./schema.ts";

export type ColumnKind = "text" | "number";

export interface TableSpec<T> {
  table: string;
  /** Model columns in SELECT order (the spans table adds its JSON `body`). */
  columns: readonly string[];
  kinds: ReadonlyMap<string, ColumnKind>;
  /** Columns declared NOT NULL (their sorts need no NULL handling, so an index can serve them). */
  notNull: ReadonlySet<string>;
  /** The column that orders rows by insertion. */
  order: string;
  /** `SELECT <columns> FROM <table>` */
  select: string;
  fromRow(row: SqlRow): T;
}

/**
 * JSON text of nested data. Values JSON cannot carry are a ValidationError (a BigInt, a cycle); as in any
 * JSON store, NaN/Infinity become null and Dates become strings.
 */
function json(v: unknown): string {
  // A frozen object cannot change, so its text is computed once: a rollout's input and config are
  // written again on every status change.
  const memo = v !== null && typeof v === "object" && Object.isFrozen(v);
  if (memo) {
    const known = jsonTexts.get(v);
    if (known !== undefined) return known;
  }
  let text: string;
  try {
    text = JSON.stringify(v);
  } catch (e) {
    throw new ValidationError(`value cannot be stored as JSON: ${(e as Error).message}`, []);
  }
  if (memo) jsonTexts.set(v as object, text);
  return text;
}
const jsonTexts = new WeakMap<object, string>();
const jsonOrNull = (v: unknown): string | null => (v === null || v === undefined ? null : json(v));
const parse = (v: SqlValue): unknown => (v === null ? null : JSON.parse(v as string));

function spec<T>(table: SQLiteTable, name: string, skip: readonly string[], order: string, fromRow: (r: SqlRow) => T): TableSpec<T> {
  const cols = Object.values(getTableColumns(table)).filter((c) => !skip.includes(c.name));
  const columns = cols.map((c) => c.name);
  const kinds = new Map<string, ColumnKind>(cols.map((c) => [c.name, c.columnType === "SQLiteText" ? "text" : "number"]));
  const notNull = new Set(cols.filter((c) => c.notNull).map((c) => c.name));
  return {
    table: name,
    columns,
    kinds,
    notNull,
    order,
    select: `SELECT ${columns.map((c) => `"${c}"`).join(", ")} FROM "${name}"`,
    fromRow,
  };
}

/** Column names by position, checked once against the schema so the row readers below stay in step. */
function expectColumns(s: TableSpec<unknown>, expected: readonly string[]): void {
  if (s.columns.join() !== expected.join()) throw new Error(`schema drift in ${s.table}: ${s.columns.join()} != ${expected.join()}`);
}

export const ROLLOUT_COLUMNS = [
  "rollout_id",
  "input",
  "start_time",
  "end_time",
  "mode",
  "resources_id",
  "status",
  "config",
  "metadata",
] as const;
export const ATTEMPT_COLUMNS = [
  "rollout_id",
  "attempt_id",
  "sequence_id",
  "start_time",
  "end_time",
  "status",
  "worker_id",
  "last_heartbeat_time",
  "metadata",
] as const;
export const SPAN_COLUMNS = [
  "rollout_id",
  "attempt_id",
  "sequence_id",
  "trace_id",
  "span_id",
  "parent_id",
  "name",
  "start_time",
  "end_time",
  "body",
] as const;
export const RESOURCES_COLUMNS = ["resources_id", "create_time", "update_time", "version", "resources"] as const;
export const WORKER_COLUMNS = [
  "worker_id",
  "status",
  "heartbeat_stats",
  "last_heartbeat_time",
  "last_dequeue_time",
  "last_busy_time",
  "last_idle_time",
  "current_rollout_id",
  "current_attempt_id",
] as const;

/** Columns holding JSON text, per table. */
export const JSON_COLUMNS: ReadonlySet<string> = new Set(["input", "config", "metadata", "resources", "heartbeat_stats", "body"]);

export const rolloutSpec = spec<Rollout>(schema.rollouts, "rollouts", [], "rowid", (r) => ({
  rollout_id: r[0] as string,
  input: parse(r[1]),
  start_time: r[2] as number,
  end_time: r[3] as number | null,
  mode: r[4] as Rollout["mode"],
  resources_id: r[5] as string | null,
  status: r[6] as Rollout["status"],
  config: parse(r[7]) as Rollout["config"],
  metadata: parse(r[8]) as Rollout["metadata"],
}));

export const attemptSpec = spec<Attempt>(schema.attempts, "attempts", ["watchdog_deadline"], "rowid", (r) => ({
  rollout_id: r[0] as string,
  attempt_id: r[1] as string,
  sequence_id: r[2] as number,
  start_time: r[3] as number,
  end_time: r[4] as number | null,
  status: r[5] as Attempt["status"],
  worker_id: r[6] as string | null,
  last_heartbeat_time: r[7] as number | null,
  metadata: parse(r[8]) as Attempt["metadata"],
}));

export const spanSpec = spec<Span>(schema.spans, "spans", ["id"], "id", (r) => ({
  ...spanBody(r[9] as string, r[3] as string, r[4] as string, r[5] as string | null),
  rollout_id: r[0] as string,
  attempt_id: r[1] as string,
  sequence_id: r[2] as number,
  trace_id: r[3] as string,
  span_id: r[4] as string,
  parent_id: r[5] as string | null,
  name: r[6] as string,
  start_time: r[7] as number | null,
  end_time: r[8] as number | null,
}));

export const resourcesSpec = spec<ResourcesUpdate>(schema.resources, "resources", ["write_order"], "rowid", (r) => ({
  resources_id: r[0] as string,
  create_time: r[1] as number,
  update_time: r[2] as number,
  version: r[3] as number,
  resources: parse(r[4]) as ResourcesUpdate["resources"],
}));

export const workerSpec = spec<Worker>(schema.workers, "workers", [], "rowid", (r) => ({
  worker_id: r[0] as string,
  status: r[1] as Worker["status"],
  heartbeat_stats: parse(r[2]) as Worker["heartbeat_stats"],
  last_heartbeat_time: r[3] as number | null,
  last_dequeue_time: r[4] as number | null,
  last_busy_time: r[5] as number | null,
  last_idle_time: r[6] as number | null,
  current_rollout_id: r[7] as string | null,
  current_attempt_id: r[8] as string | null,
}));

expectColumns(rolloutSpec, ROLLOUT_COLUMNS);
expectColumns(attemptSpec, ATTEMPT_COLUMNS);
expectColumns(spanSpec, SPAN_COLUMNS);
expectColumns(resourcesSpec, RESOURCES_COLUMNS);
expectColumns(workerSpec, WORKER_COLUMNS);

export const SPECS: { [K in CollectionName]: TableSpec<Rows[K]> } = {
  rollouts: rolloutSpec,
  attempts: attemptSpec,
  spans: spanSpec,
  resources: resourcesSpec,
  workers: workerSpec,
};

/** The SQL value of one model field (JSON columns as text). */
export function toSql(column: string, v: unknown): SqlValue {
  if (JSON_COLUMNS.has(column)) return column === "input" ? json(v) : jsonOrNull(v);
  return (v ?? null) as SqlValue;
}

export const rolloutValues = (r: Rollout): SqlValue[] => [
  r.rollout_id,
  json(r.input),
  r.start_time,
  r.end_time,
  r.mode,
  r.resources_id,
  r.status,
  json(r.config),
  jsonOrNull(r.metadata),
];

/** The columns an attempt row is written with: the model's, then its watchdog deadline (schema.ts). */
export const ATTEMPT_ROW_COLUMNS = [...ATTEMPT_COLUMNS, "watchdog_deadline"] as const;

/** An attempt row's values (ATTEMPT_ROW_COLUMNS): `deadline` is its rollout's watchdog deadline if it is the latest attempt, else null. */
export const attemptValues = (a: Attempt, deadline: number | null): SqlValue[] => [
  a.rollout_id,
  a.attempt_id,
  a.sequence_id,
  a.start_time,
  a.end_time,
  a.status,
  a.worker_id,
  a.last_heartbeat_time,
  jsonOrNull(a.metadata),
  deadline,
];

export const workerValues = (w: Worker): SqlValue[] => [
  w.worker_id,
  w.status,
  jsonOrNull(w.heartbeat_stats),
  w.last_heartbeat_time,
  w.last_dequeue_time,
  w.last_busy_time,
  w.last_idle_time,
  w.current_rollout_id,
  w.current_attempt_id,
];

/**
 * A span row's values: its columns, and everything else (extra keys included) as the JSON `body`, minus
 * the fields that hold only what the columns already say or their empty value, which nearly every span
 * carries and spanBody rebuilds on read:
 * - `context` repeating the row's trace and span ids (`{trace_id, span_id, is_remote: false, trace_state: {}}`);
 * - `parent` that is null for a root span, or repeats the trace id and `parent_id` the same way;
 * - empty `attributes`, `events` and `links`, and `resource: {attributes: {}, schema_url: ""}`;
 * and a status without a description is stored as its code alone (`"status": "OK"`).
 * Less JSON to write, bind, store and parse: the benchmarks' LLM-call span takes 468 bytes a row instead of
 * 573 (and 695 when the context was stored too).
 */
export function spanValues(s: Span, out: SqlValue[]): void {
  const {
    rollout_id,
    attempt_id,
    sequence_id,
    trace_id,
    span_id,
    parent_id,
    name,
    start_time,
    end_time,
    context,
    parent,
    attributes,
    events,
    links,
    resource,
    ...body
  } = s;
  const extra = body as Record<string, unknown>;
  if (!isEmptyObject(attributes)) extra.attributes = attributes;
  if (events.length > 0) extra.events = events;
  // A status without a description is stored as its code alone (a string: the model's status is an object).
  if (isBareStatus(body.status)) extra.status = body.status.status_code;
  if (!isDerivedContext(context, trace_id, span_id)) extra.context = context;
  if (parent_id === null ? parent !== null : !isDerivedContext(parent, trace_id, parent_id)) extra.parent = parent;
  if (links.length > 0) extra.links = links;
  if (!isEmptyResource(resource)) extra.resource = resource;
  out.push(rollout_id, attempt_id, sequence_id, trace_id, span_id, parent_id, name, start_time, end_time, json(body));
}

/** `{trace_id, span_id, is_remote: false, trace_state: {}}` with exactly these four fields. */
function isDerivedContext(c: Span["context"], traceId: string, spanId: string): boolean {
  if (c === null || c.trace_id !== traceId || c.span_id !== spanId || c.is_remote !== false) return false;
  // Only the four fields (SpanContext allows extra keys, which must be kept).
  return isEmptyObject(c.trace_state) && keyCount(c) === 4;
}

/** `{status_code, description: null}` and nothing else (TraceStatus allows extra keys). */
const isBareStatus = (st: Span["status"]): boolean => st.description === null && keyCount(st) === 2;

const isEmptyResource = (r: Span["resource"]): boolean => r.schema_url === "" && isEmptyObject(r.attributes) && keyCount(r) === 2;

function isEmptyObject(o: object): boolean {
  for (const _ in o) return false;
  return true;
}

function keyCount(o: object): number {
  let n = 0;
  for (const _ in o) n++;
  return n;
}

/** The span fields stored in `body`, with the left-out ones rebuilt (see spanValues). */
function spanBody(text: string, traceId: string, spanId: string, parentId: string | null): Span {
  const body = JSON.parse(text) as Span;
  if (typeof body.status === "string") body.status = { status_code: body.status, description: null };
  if (body.context === undefined) body.context = { trace_id: traceId, span_id: spanId, is_remote: false, trace_state: {} };
  if (body.parent === undefined)
    body.parent = parentId === null ? null : { trace_id: traceId, span_id: parentId, is_remote: false, trace_state: {} };
  if (body.attributes === undefined) body.attributes = {};
  if (body.events === undefined) body.events = [];
  if (body.links === undefined) body.links = [];
  if (body.resource === undefined) body.resource = { attributes: {}, schema_url: "" };
  return body;
}
