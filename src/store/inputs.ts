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
  SortOrder,
  Span,
  ValidationError,
  parseOrThrow,
} from "../types/index.ts";
import type { NamedResources as NamedResourcesT, RolloutConfig as RolloutConfigT, RolloutMode as RolloutModeT, SortOrder as SortOrderT, FilterLogic as FilterLogicT } from "../types/index.ts";
import type { AttemptPatch, PageOptions, RolloutPatch } from "./base.ts";
import { ownedCopy } from "./owned.ts";

const JsonObject = z.record(z.string(), z.unknown());

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

/** The config a rollout gets when none is given (a literal: this runs for every enqueue). */
export const defaultConfig = (): RolloutConfigT => ({
  timeout_seconds: null,
  unresponsive_seconds: null,
  max_attempts: 1,
  retry_condition: [],
});

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
    return { input: owned, mode: null, resources_id: null, config: defaultConfig(), metadata: {}, worker_id: null };
  }
  const o = parseOrThrow(RolloutOptionsSchema, options, "rollout options");
  return {
    input: owned,
    mode: o.mode ?? null,
    resources_id: o.resources_id ?? null,
    config: o.config ?? defaultConfig(),
    metadata: o.metadata ? ownedCopy(o.metadata, "metadata") : {},
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
    if (k === "status" ? !ATTEMPT_STATUSES.has(v as string) : k === "worker_id" ? typeof v !== "string" : k === "last_heartbeat_time" ? !Number.isFinite(v) : true) {
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
  return ownedCopy(parseOrThrow(NamedResources, resources, "resources"), "resources");
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const isNum = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);
const isNumOrNull = (v: unknown): boolean => v === null || isNum(v);
const isStrOrNull = (v: unknown): boolean => v === null || typeof v === "string";

function isAttributeValue(v: unknown): boolean {
  const t = typeof v;
  if (t === "string" || t === "boolean") return true;
  if (t === "number") return Number.isFinite(v);
  if (!Array.isArray(v) || v.length === 0) return Array.isArray(v);
  const first = typeof v[0];
  if (first !== "string" && first !== "boolean" && first !== "number") return false;
  for (const x of v) if (typeof x !== first || (first === "number" && !Number.isFinite(x))) return false;
  return true;
}

function isAttributes(v: unknown): boolean {
  if (!isObj(v)) return false;
  for (const k in v) if (!isAttributeValue(v[k])) return false;
  return true;
}

function isSpanContext(v: unknown): boolean {
  if (!isObj(v) || typeof v.trace_id !== "string" || typeof v.span_id !== "string" || typeof v.is_remote !== "boolean") return false;
  const ts = v.trace_state;
  if (!isObj(ts)) return false;
  for (const k in ts) if (typeof ts[k] !== "string") return false;
  return true;
}

const STATUS_CODES = new Set(["UNSET", "OK", "ERROR"]);

/**
 * True when a span is already complete and valid (every key present, no default to fill), checked
 * without allocating. The hot path then skips zod; anything else goes through the zod schema, which
 * fills defaults or reports precise issues. Must accept nothing that `Span` rejects.
 */
function isCompleteSpan(s: unknown): s is Span {
  if (!isObj(s)) return false;
  if (typeof s.rollout_id !== "string" || typeof s.attempt_id !== "string" || typeof s.trace_id !== "string") return false;
  if (typeof s.span_id !== "string" || typeof s.name !== "string" || !Number.isSafeInteger(s.sequence_id)) return false;
  if (!isStrOrNull(s.parent_id) || !isNumOrNull(s.start_time) || !isNumOrNull(s.end_time)) return false;
  const st = s.status;
  if (!isObj(st) || !STATUS_CODES.has(st.status_code as string) || !isStrOrNull(st.description)) return false;
  if (!isAttributes(s.attributes)) return false;
  if (!Array.isArray(s.events) || !Array.isArray(s.links)) return false;
  for (const e of s.events) {
    if (!isObj(e) || typeof e.name !== "string" || !isAttributes(e.attributes) || !isNumOrNull(e.timestamp)) return false;
  }
  for (const l of s.links) {
    if (!isObj(l) || !isSpanContext(l.context) || !(l.attributes === null || isAttributes(l.attributes))) return false;
  }
  if (!(s.context === null || isSpanContext(s.context)) || !(s.parent === null || isSpanContext(s.parent))) return false;
  const r = s.resource;
  if (!isObj(r) || !isAttributes(r.attributes) || typeof r.schema_url !== "string") return false;
  // OtelResource drops extra keys: let zod do that.
  for (const k in r) if (k !== "attributes" && k !== "schema_url") return false;
  return true;
}

/** A caller's span, validated (defaults filled), copied and frozen. */
export function ownedSpan(span: unknown, index?: number): Span {
  if (isCompleteSpan(span)) return ownedCopy(span, "span");
  const r = Span.safeParse(span);
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
export function statusList<T extends string>(v: readonly T[] | null | undefined, statuses: z.ZodEnum<{ [K in T]: K }>, name: string): readonly T[] | null {
  if (v === null || v === undefined) return null;
  return parseOrThrow(z.array(statuses), v, name);
}
