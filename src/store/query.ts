/**
 * A backend-neutral description of a query (filter, sort, page) plus the in-memory evaluator (each filter
 * matches by equality, a set of values, or a substring; conditions join with `and`/`or`; the sort is
 * stable, missing values last). SQL backends translate the same description into
 * WHERE / ORDER BY / LIMIT; the memory backend runs `runQuery` over its candidate rows.
 */
import type { FilterLogic, PaginatedResult, SortOrder } from "../types/index.ts";
import { ValidationError, paginate } from "../types/index.ts";

/**
 * Conditions on one field. An operator whose value is `null`/`undefined` adds no condition.
 * - `exact`: equality (`===` on JSON scalars).
 * - `within`: the field value is one of the list (an empty list matches nothing).
 * - `contains`: substring when the field is a string, element membership when it is an array; a null
 *   field never matches.
 */
export interface FieldOps {
  exact?: unknown;
  within?: readonly unknown[] | null;
  contains?: string | null;
}

export interface QuerySpec {
  /** Conditions that must all hold whatever `logic` says (e.g. the rollout a span query is scoped to). */
  must?: Record<string, FieldOps>;
  /** Optional conditions, combined with `logic`. No condition at all matches everything (docs/departures.md#3). */
  where?: Record<string, FieldOps>;
  logic?: FilterLogic;
  /** No sort: insertion order. */
  sort?: { field: string; order: SortOrder } | null;
  /** -1 = unlimited, 0 = no items (but the right total). */
  limit: number;
  offset: number;
}

type Row = Record<string, unknown>;
type Condition = (row: Row) => boolean;

function conditionsOf(fields: Record<string, FieldOps> | undefined): Condition[] {
  const out: Condition[] = [];
  if (!fields) return out;
  for (const [field, ops] of Object.entries(fields)) {
    if (ops.exact !== undefined && ops.exact !== null) {
      const v = ops.exact;
      out.push((r) => r[field] === v);
    }
    if (ops.within !== undefined && ops.within !== null) {
      const set = new Set(ops.within);
      out.push((r) => set.has(r[field]));
    }
    if (ops.contains !== undefined && ops.contains !== null) {
      const needle = ops.contains;
      out.push((r) => {
        const v = r[field];
        if (typeof v === "string") return v.includes(needle);
        if (Array.isArray(v)) return v.includes(needle);
        return false;
      });
    }
  }
  return out;
}

/** Compiles the filter part of a spec into one predicate. */
export function compileFilter(spec: Pick<QuerySpec, "must" | "where" | "logic">): (row: Row) => boolean {
  const must = conditionsOf(spec.must);
  const where = conditionsOf(spec.where);
  const any = spec.logic === "or";
  if (must.length === 0 && where.length === 0) return () => true;
  return (row) => {
    for (const c of must) if (!c(row)) return false;
    if (where.length === 0) return true;
    return any ? where.some((c) => c(row)) : where.every((c) => c(row));
  };
}

/**
 * Sort key of a field value: a null `*_time` sorts as +infinity (last in asc); another null sorts as
 * the empty value of its column's type (0 or ""), as upstream's model defaults do.
 */
function sortKeys(rows: Row[], field: string): (number | string)[] {
  const isTime = field.endsWith("_time");
  let nullKey: number | string = isTime ? Number.POSITIVE_INFINITY : "";
  if (!isTime) {
    for (const r of rows) {
      const v = r[field];
      if (typeof v === "number" || typeof v === "boolean") {
        nullKey = 0;
        break;
      }
      if (typeof v === "string") break;
    }
  }
  return rows.map((r) => {
    const v = r[field];
    if (v === null || v === undefined) return nullKey;
    if (typeof v === "boolean") return v ? 1 : 0;
    if (typeof v === "number" || typeof v === "string") return v;
    throw new ValidationError(`Cannot sort by ${field}: its values are not comparable`, ["sort_by"]);
  });
}

function isNonDecreasing(keys: readonly (number | string)[]): boolean {
  for (let i = 1; i < keys.length; i++) if (keys[i - 1]! > keys[i]!) return false;
  return true;
}

/** Stable sort; `desc` reverses the order but keeps ties in their original order. */
export function sortRows<T>(rows: T[], sort: { field: string; order: SortOrder } | null | undefined): T[] {
  if (!sort || rows.length < 2) return rows;
  const keys = sortKeys(rows as Row[], sort.field);
  const hasString = keys.some((k) => typeof k === "string" && k !== "");
  const hasNumber = keys.some((k) => typeof k === "number" && k !== Number.POSITIVE_INFINITY);
  if (hasString && hasNumber) {
    throw new ValidationError(`Cannot sort by ${sort.field}: it mixes numbers and strings`, ["sort_by"]);
  }
  if (sort.order === "asc" && isNonDecreasing(keys)) return rows; // the usual case: spans by sequence_id
  const idx = rows.map((_, i) => i);
  const sign = sort.order === "desc" ? -1 : 1;
  idx.sort((a, b) => {
    const ka = keys[a]!;
    const kb = keys[b]!;
    // Code-point order for strings (not locale order), as Python compares them.
    const c = ka < kb ? -1 : ka > kb ? 1 : 0;
    return c * sign;
  });
  return idx.map((i) => rows[i]!);
}

/** Filters, sorts and pages candidate rows in memory. */
export function runQuery<T>(rows: Iterable<T>, spec: QuerySpec): PaginatedResult<T> {
  const keep = compileFilter(spec);
  const matched: T[] = [];
  for (const r of rows) if (keep(r as Row)) matched.push(r);
  return paginate(sortRows(matched, spec.sort), spec.limit, spec.offset);
}

/** The value a spec pins a field to with `must.exact`, if any (lets a backend use an index). */
export function pinnedValue(spec: QuerySpec, field: string): unknown {
  const v = spec.must?.[field]?.exact;
  return v === null ? undefined : v;
}
