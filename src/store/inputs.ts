/**
 * Validation of what callers hand to the store. Everything from outside is checked with the zod
 * schemas (ValidationError with issue paths) and copied (the store never keeps a caller's object);
 * rows the store builds itself are not parsed again.
 */
import { z } from "zod";
import {
  AttemptStatus,
  FilterLogic,
  NamedResources,
  RolloutConfig,
  RolloutMode,
  RolloutStatus,
  SPAN_FIELDS,
  SortOrder,
  Span,
  ValidationError,
  parseOrThrow,
} from "../types/index.ts";
import type {
  Attributes,
  SpanContext as SpanContextT,
  NamedResources as NamedResourcesT,
  RolloutConfig as RolloutConfigT,
  RolloutMode as RolloutModeT,
  SortOrder as SortOrderT,
  FilterLogic as FilterLogicT,
} from "../types/index.ts";
import type { AttemptPatch, PageOptions, RolloutPatch } from "./base.ts";
import { setOwn } from "../types/own-keys.ts";
import { EMPTY_ARRAY, EMPTY_OBJECT, ownedCopy, safeParseWithProtoKeys } from "./owned.ts";

/**
 * A JSON object of anything, checked but not rebuilt: zod's record would copy it and drop a `"__proto__"`
 * key, which the store keeps as an ordinary key (ownedCopy copies it afterwards).
 */
export const JsonObject = z.custom<Record<string, unknown>>((v) => typeof v === "object" && v !== null && !Array.isArray(v), {
  message: "expected an object",
});

const RolloutOptionsSchema = z.object({
  mode: RolloutMode.nullable().optional(),
  resources_id: z.string().nullable().optional(),
  config: RolloutConfig.nullable().optional(),
  metadata: JsonObject.nullable().optional(),
  worker_id: z.string().nullable().optional(),
});

export interface RolloutDraft {
  input: unknown;
  mode: RolloutModeT | null;
  /** null: take the latest resources snapshot when the rollout is created. */
  resources_id: string | null;
  config: RolloutConfigT;
  metadata: Record<string, unknown>;
  worker_id: string | null;
}

/** The config a rollout gets when none is given: one frozen object shared by every such rollout (rows are frozen anyway). */
const DEFAULT_CONFIG: RolloutConfigT = Object.freeze({
  timeout_seconds: null,
  unresponsive_seconds: null,
  max_attempts: 1,
  retry_condition: EMPTY_ARRAY as unknown as RolloutConfigT["retry_condition"],
});
export const defaultConfig = (): RolloutConfigT => DEFAULT_CONFIG;

const hasAnyValue = (o: object | null | undefined): boolean => {
  if (!o) return false;
  for (const k in o) if ((o as Record<string, unknown>)[k] !== undefined) return true;
  return false;
};

/** Input and options of startRollout / enqueueRollout, validated, defaulted and copied. */
export function rolloutDraft(input: unknown, options: object | null | undefined): RolloutDraft {
  if (input === undefined) throw new ValidationError("input is required (null is allowed)", ["input"]);
  const owned = ownedCopy(input, "input");
  if (!hasAnyValue(options)) {
    return { input: owned, mode: null, resources_id: null, config: DEFAULT_CONFIG, metadata: EMPTY_OBJECT, worker_id: null };
  }
  const o = parseOrThrow(RolloutOptionsSchema, options, "rollout options");
  return {
    input: owned,
    mode: o.mode ?? null,
    resources_id: o.resources_id ?? null,
    config: o.config ?? DEFAULT_CONFIG,
    metadata: o.metadata ? ownedCopy(o.metadata, "metadata") : EMPTY_OBJECT,
    worker_id: o.worker_id ?? null,
  };
}

const RolloutPatchSchema = z.object({
  mode: RolloutMode.nullable().optional(),
  resources_id: z.string().nullable().optional(),
  status: RolloutStatus.optional(),
  config: RolloutConfig.optional(),
  metadata: JsonObject.nullable().optional(),
});

/** A validated rollout patch: only the given keys are present. */
export function rolloutPatch(patch: RolloutPatch): RolloutPatch {
  if (patch === null || typeof patch !== "object") throw new ValidationError("the rollout patch must be an object", []);
  const p = parseOrThrow(RolloutPatchSchema, patch, "rollout update");
  const out: RolloutPatch = {};
  if (patch.input !== undefined) out.input = ownedCopy(patch.input, "input");
  if (p.mode !== undefined) out.mode = p.mode;
  if (p.resources_id !== undefined) out.resources_id = p.resources_id;
  if (p.status !== undefined) out.status = p.status;
  if (p.config !== undefined) out.config = p.config;
  if (p.metadata !== undefined) out.metadata = p.metadata === null ? null : ownedCopy(p.metadata, "metadata");
  return out;
}

const AttemptPatchSchema = z.object({
  status: AttemptStatus.optional(),
  worker_id: z.string().optional(),
  last_heartbeat_time: z.number().optional(),
  metadata: JsonObject.optional(),
});

const ATTEMPT_STATUSES = new Set<string>(AttemptStatus.options);

/** The common patches (status and/or worker_id, heartbeat) checked without zod. */
function isPlainAttemptPatch(p: AttemptPatch): boolean {
  for (const k in p) {
    const v = (p as Record<string, unknown>)[k];
    if (v === undefined) continue;
    if (
      k === "status"
        ? !ATTEMPT_STATUSES.has(v as string)
        : k === "worker_id"
          ? typeof v !== "string"
          : k === "last_heartbeat_time"
            ? !Number.isFinite(v)
            : true
    ) {
      return false;
    }
  }
  return true;
}

/** A validated attempt patch; `null` is refused for every field (none of them may be cleared). */
export function attemptPatch(patch: AttemptPatch): AttemptPatch {
  if (patch === null || typeof patch !== "object") throw new ValidationError("the attempt patch must be an object", []);
  if (isPlainAttemptPatch(patch)) {
    const out: AttemptPatch = {};
    if (patch.status !== undefined) out.status = patch.status;
    if (patch.worker_id !== undefined) out.worker_id = patch.worker_id;
    if (patch.last_heartbeat_time !== undefined) out.last_heartbeat_time = patch.last_heartbeat_time;
    return out;
  }
  const p = parseOrThrow(AttemptPatchSchema, patch, "attempt update");
  const out: AttemptPatch = {};
  if (p.status !== undefined) out.status = p.status;
  if (p.worker_id !== undefined) out.worker_id = p.worker_id;
  if (p.last_heartbeat_time !== undefined) out.last_heartbeat_time = p.last_heartbeat_time;
  if (p.metadata !== undefined) out.metadata = ownedCopy(p.metadata, "metadata");
  return out;
}

export function namedResources(resources: unknown): NamedResourcesT {
  const r = safeParseWithProtoKeys(NamedResources, resources);
  if (!r.success) throw ValidationError.fromZod(r.error, "resources");
  return ownedCopy(r.data, "resources");
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const isNum = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);
const isNumOrNull = (v: unknown): boolean => v === null || isNum(v);
const isStrOrNull = (v: unknown): boolean => v === null || typeof v === "string";

/** Own enumerable keys of a plain object (for-in without allocating a key array). */
function keyCount(o: object): number {
  let n = 0;
  for (const _ in o) n++;
  return n;
}

/** A valid attribute value, copied (arrays frozen); undefined when invalid. */
function copyAttributeValue(v: unknown): unknown {
  const t = typeof v;
  if (t === "string" || t === "boolean") return v;
  if (t === "number") return Number.isFinite(v) ? v : undefined;
  if (!Array.isArray(v)) return undefined;
  if (v.length === 0) return EMPTY_ARRAY;
  const first = typeof v[0];
  if (first !== "string" && first !== "boolean" && first !== "number") return undefined;
  const out = new Array(v.length);
  for (let i = 0; i < v.length; i++) {
    const x: unknown = v[i];
    if (typeof x !== first || (first === "number" && !Number.isFinite(x))) return undefined;
    out[i] = x;
  }
  return Object.freeze(out);
}

/** Valid attributes, copied and frozen; null when invalid. */
function copyAttributes(v: unknown): Attributes | null {
  if (!isObj(v)) return null;
  let out: Record<string, unknown> | null = null;
  for (const k in v) {
    const x = copyAttributeValue(v[k]);
    if (x === undefined) return null;
    setOwn((out ??= {}), k, x);
  }
  return (out === null ? EMPTY_OBJECT : Object.freeze(out)) as Attributes;
}

/**
 * The loose parts of a span (status, contexts, events, links) are copied as fresh literals when they
 * hold exactly their model's keys; with extra keys (checked already), a generic copy keeps those too.
 */
const hasExtraKeys = (v: object, known: number): boolean => keyCount(v) !== known;

function copySpanContext(v: unknown): SpanContextT | null {
  if (!isObj(v) || typeof v.trace_id !== "string" || typeof v.span_id !== "string" || typeof v.is_remote !== "boolean") return null;
  const ts = v.trace_state;
  if (!isObj(ts)) return null;
  let state: Record<string, string> | null = null;
  for (const k in ts) {
    const x = ts[k];
    if (typeof x !== "string") return null;
    setOwn((state ??= {}), k, x);
  }
  const traceState = state === null ? EMPTY_OBJECT : Object.freeze(state);
  if (hasExtraKeys(v, 4)) return ownedCopy(v as SpanContextT, "span");
  return Object.freeze({ trace_id: v.trace_id, span_id: v.span_id, is_remote: v.is_remote, trace_state: traceState });
}

const STATUS_CODES = new Set(["UNSET", "OK", "ERROR"]);

function copyStatus(v: unknown): Span["status"] | null {
  if (!isObj(v) || !STATUS_CODES.has(v.status_code as string) || !isStrOrNull(v.description)) return null;
  if (hasExtraKeys(v, 2)) return ownedCopy(v as Span["status"], "span");
  return Object.freeze({ status_code: v.status_code as Span["status"]["status_code"], description: v.description as string | null });
}

function copyEvents(v: unknown): Span["events"] | null {
  if (!Array.isArray(v)) return null;
  if (v.length === 0) return EMPTY_ARRAY as unknown as Span["events"];
  const out = new Array<Span["events"][number]>(v.length);
  for (let i = 0; i < v.length; i++) {
    const e: unknown = v[i];
    if (!isObj(e) || typeof e.name !== "string" || !isNumOrNull(e.timestamp)) return null;
    const attributes = copyAttributes(e.attributes);
    if (attributes === null) return null;
    out[i] = hasExtraKeys(e, 3)
      ? ownedCopy(e as Span["events"][number], "span")
      : Object.freeze({ name: e.name, attributes, timestamp: e.timestamp as number | null });
  }
  return Object.freeze(out) as Span["events"];
}

function copyLinks(v: unknown): Span["links"] | null {
  if (!Array.isArray(v)) return null;
  if (v.length === 0) return EMPTY_ARRAY as unknown as Span["links"];
  const out = new Array<Span["links"][number]>(v.length);
  for (let i = 0; i < v.length; i++) {
    const l: unknown = v[i];
    if (!isObj(l)) return null;
    const context = copySpanContext(l.context);
    const attributes = l.attributes === null ? null : copyAttributes(l.attributes);
    if (context === null || (attributes === null && l.attributes !== null)) return null;
    out[i] = hasExtraKeys(l, 2) ? ownedCopy(l as Span["links"][number], "span") : Object.freeze({ context, attributes });
  }
  return Object.freeze(out) as Span["links"];
}

/**
 * A complete and valid span (every key present, no default to fill), checked and deep-copied in one
 * pass into frozen objects; null for anything else, which then goes through the zod schema (it fills
 * defaults or reports precise issues). Must accept nothing that `Span` rejects.
 */
function copyCompleteSpan(s: unknown): Span | null {
  if (!isObj(s)) return null;
  const { rollout_id, attempt_id, sequence_id, trace_id, span_id, parent_id, name, start_time, end_time } = s;
  if (typeof rollout_id !== "string" || typeof attempt_id !== "string" || typeof trace_id !== "string") return null;
  if (typeof span_id !== "string" || typeof name !== "string" || !Number.isSafeInteger(sequence_id)) return null;
  if (!isStrOrNull(parent_id) || !isNumOrNull(start_time) || !isNumOrNull(end_time)) return null;
  const status = copyStatus(s.status);
  const attributes = copyAttributes(s.attributes);
  const events = copyEvents(s.events);
  const links = copyLinks(s.links);
  const context = s.context === null ? null : copySpanContext(s.context);
  const parent = s.parent === null ? null : copySpanContext(s.parent);
  if (status === null || attributes === null || events === null || links === null) return null;
  if ((context === null && s.context !== null) || (parent === null && s.parent !== null)) return null;
  const r = s.resource;
  // OtelResource drops extra keys: let zod do that.
  if (!isObj(r) || typeof r.schema_url !== "string" || keyCount(r) !== 2) return null;
  const resourceAttributes = copyAttributes(r.attributes);
  if (resourceAttributes === null) return null;
  const out: Span = {
    rollout_id,
    attempt_id,
    sequence_id: sequence_id as number,
    trace_id,
    span_id,
    parent_id: parent_id as string | null,
    name,
    status,
    attributes,
    events,
    links,
    start_time: start_time as number | null,
    end_time: end_time as number | null,
    context,
    parent,
    resource: Object.freeze({ attributes: resourceAttributes, schema_url: r.schema_url }),
  };
  // Extra keys (Span is a loose object) keep their values.
  if (keyCount(s) !== SPAN_FIELDS.length) {
    for (const k in s) if (!Object.hasOwn(out, k) && s[k] !== undefined) setOwn(out, k, ownedCopy(s[k], "span"));
  }
  return Object.freeze(out);
}

/** A caller's span, validated (defaults filled), copied and frozen. */
export function ownedSpan(span: unknown, index?: number): Span {
  const copy = copyCompleteSpan(span);
  if (copy !== null) return copy;
  const r = safeParseWithProtoKeys(Span, span);
  if (!r.success) {
    const err = ValidationError.fromZod(r.error, index === undefined ? "span" : `span #${index}`);
    if (index !== undefined) for (const i of err.issues) i.path.unshift(index);
    throw err;
  }
  return ownedCopy(r.data, "span");
}

export function heartbeatStats(stats: unknown): Record<string, unknown> {
  return ownedCopy(parseOrThrow(JsonObject, stats, "heartbeat_stats"), "heartbeat_stats");
}

export function requireId(value: unknown, name: string): string {
  if (typeof value !== "string") throw new ValidationError(`${name} must be a string`, [name]);
  return value;
}

export interface Page {
  limit: number;
  offset: number;
  sort: { field: string; order: SortOrderT } | null;
}

/** Checks limit/offset/sort of a query against the target model's fields. */
export function pageOf(q: PageOptions | undefined, fields: readonly string[], defaultSortBy: string | null = null): Page {
  const limit = q?.limit ?? -1;
  const offset = q?.offset ?? 0;
  if (!Number.isInteger(limit) || limit < -1) {
    throw new ValidationError("Limit must be greater than or equal to 0, or -1 for no limit", ["limit"]);
  }
  if (!Number.isInteger(offset) || offset < 0) {
    throw new ValidationError("Offset must be greater than or equal to 0", ["offset"]);
  }
  const sortBy = q?.sort_by ?? defaultSortBy;
  const order = parseOrThrow(SortOrder, q?.sort_order ?? "asc", "sort_order");
  if (sortBy !== null && !fields.includes(sortBy)) {
    throw new ValidationError(`Invalid sort_by: ${sortBy}, allowed fields are: ${fields.join(", ")}`, ["sort_by"]);
  }
  return { limit, offset, sort: sortBy === null ? null : { field: sortBy, order } };
}

export function filterLogic(v: unknown): FilterLogicT {
  return parseOrThrow(FilterLogic, v ?? "and", "filter_logic");
}

export function stringList<T extends string>(v: readonly T[] | null | undefined, name: string): readonly T[] | null {
  if (v === null || v === undefined) return null;
  if (!Array.isArray(v)) throw new ValidationError(`${name} must be a list`, [name]);
  for (const x of v) if (typeof x !== "string") throw new ValidationError(`${name} must hold strings`, [name]);
  return v;
}

/** A status filter: every value must be one of the enum's (a typo would otherwise silently match nothing). */
export function statusList<T extends string>(
  v: readonly T[] | null | undefined,
  statuses: z.ZodEnum<{ [K in T]: K }>,
  name: string,
): readonly T[] | null {
  if (v === null || v === undefined) return null;
  return parseOrThrow(z.array(statuses), v, name);
}
