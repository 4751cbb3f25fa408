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

/** A validated attempt patch; `null` is refused for every field (none of them may be cleared). */
export function attemptPatch(patch: AttemptPatch): AttemptPatch {
  if (patch === null || typeof patch !== "object") throw new ValidationError("the attempt patch must be an object", []);
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

/** A caller's span, validated (defaults filled) and copied. */
export function ownedSpan(span: unknown, index?: number): Span {
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
  return v;
}
