/**
 * How each collection's model rows map to the SQL tables of schema.ts. Everything is read from the
 * drizzle tables: the columns and their order, which hold JSON (`text(..., { mode: "json" })`), which are
 * NOT NULL. Rollouts, attempts, resources and workers are read and written column by column by name, so
 * a new model field is its zod schema plus a column (and the migration drizzle-kit makes from it);
 * test/store/schema-columns.test.ts checks that the two agree. Spans have a layout of their own (a few
 * columns, everything else in a JSON `body`). Every converter builds fresh objects, so rows handed to the
 * core are never shared with anything the storage keeps.
 */
import { getTableColumns } from "drizzle-orm";
import type { SQLiteColumn, SQLiteTable } from "drizzle-orm/sqlite-core";
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

/** A table whose rows are model objects with a field per column: read and written by column name. */
export interface ModelTableSpec<T> extends TableSpec<T> {
  /** The SQL values of a model row, in column order (JSON columns as text). */
  values(row: T): SqlValue[];
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
const asIs = (v: unknown): SqlValue => (v ?? null) as SqlValue;

const isJson = (c: SQLiteColumn): boolean => c.columnType === "SQLiteTextJson";

function spec<T>(table: SQLiteTable, name: string, skip: readonly string[], order: string, fromRow: (r: SqlRow) => T): TableSpec<T> {
  const cols = modelColumns(table, skip);
  const columns = cols.map((c) => c.name);
  const kinds = new Map<string, ColumnKind>(cols.map((c) => [c.name, c.getSQLType().startsWith("text") ? "text" : "number"]));
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

/** A table's columns in declaration order, less those that hold no model field (`skip`). */
const modelColumns = (table: SQLiteTable, skip: readonly string[]): SQLiteColumn[] =>
  Object.values(getTableColumns(table)).filter((c) => !skip.includes(c.name));

/**
 * The spec of a table with one column per model field: a row is read into an object with a key per
 * column (JSON parsed) and written from the fields of the same names. A NOT NULL JSON column (a
 * rollout's `input`) stores a null value as the text `null`.
 */
function modelSpec<T>(table: SQLiteTable, name: string, skip: readonly string[]): ModelTableSpec<T> {
  const cols = modelColumns(table, skip);
  const names = cols.map((c) => c.name);
  const readers = cols.map((c) => (isJson(c) ? parse : null));
  const writers = cols.map((c) => (!isJson(c) ? asIs : c.notNull ? json : jsonOrNull));
  const fromRow = (r: SqlRow): T => {
    const out: Record<string, unknown> = {};
    for (let i = 0; i < names.length; i++) {
      const read = readers[i];
      out[names[i]!] = read ? read(r[i]!) : r[i];
    }
    return out as T;
  };
  const values = (row: T): SqlValue[] => {
    const out = new Array<SqlValue>(names.length);
    for (let i = 0; i < names.length; i++) out[i] = writers[i]!((row as Record<string, unknown>)[names[i]!]);
    return out;
  };
  return { ...spec(table, name, skip, "rowid", fromRow), values };
}

// Columns that hold no model field: the deadline the watchdog reads, the order the latest resources are found by.
export const rolloutSpec = modelSpec<Rollout>(schema.rollouts, "rollouts", []);
export const attemptSpec = modelSpec<Attempt>(schema.attempts, "attempts", ["watchdog_deadline"]);
export const resourcesSpec = modelSpec<ResourcesUpdate>(schema.resources, "resources", ["write_order"]);
export const workerSpec = modelSpec<Worker>(schema.workers, "workers", []);

/** The spans table's layout, which spanSpec and spanValues follow by position (checked against schema.ts below). */
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

if (spanSpec.columns.join() !== SPAN_COLUMNS.join())
  throw new Error(`schema drift in spans: ${spanSpec.columns.join()} != ${SPAN_COLUMNS.join()}`);

export const SPECS: { [K in CollectionName]: TableSpec<Rows[K]> } = {
  rollouts: rolloutSpec,
  attempts: attemptSpec,
  spans: spanSpec,
  resources: resourcesSpec,
  workers: workerSpec,
};

/** The columns an attempt row is written with: the model's, then its watchdog deadline (schema.ts). */
export const ATTEMPT_ROW_COLUMNS = [...attemptSpec.columns, "watchdog_deadline"];

/** An attempt row's values (ATTEMPT_ROW_COLUMNS): `deadline` is its rollout's watchdog deadline if it is the latest attempt, else null. */
export const attemptValues = (a: Attempt, deadline: number | null): SqlValue[] => {
  const values = attemptSpec.values(a);
  values.push(deadline);
  return values;
};

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
