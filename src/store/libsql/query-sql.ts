/**
 * Pushes a `QuerySpec` (../query.ts) down into SQL with the same semantics as its reference `runQuery`:
 * - exact: `col = ?`; within: `col IN (SELECT value FROM json_each(?))` (an empty list matches
 *   nothing; a one-value list is `col = ?`, so a status filter reads its index in insertion order);
 *   contains: `instr(col, ?) > 0` (case-sensitive substring; a NULL column never matches).
 * - sort: a `*_time` column sorts NULL last in asc (first in desc); another column sorts NULL as its
 *   type's empty value ('' or 0); a NOT NULL column sorts plainly (so an index on it can give the
 *   order); ties keep insertion order in both directions (stable sort).
 * - limit -1 = all, 0 = no items but the total.
 * Conditions or sorts on JSON columns (e.g. sorting rollouts by `input`) cannot be expressed over the
 * stored text; for those, `planQuery` returns null and the storage filters/sorts in JS with `runQuery`.
 */
import type { FieldOps, QuerySpec } from "../query.ts";
import type { SqlValue } from "./driver.ts";
import type { TableSpec } from "./tables.ts";

export interface SqlPlan {
  /** `WHERE ...` (or "") with its arguments. */
  where: string;
  args: SqlValue[];
  orderBy: string;
}

const q = (c: string): string => `"${c}"`;
const isScalarArg = (v: unknown): v is string | number => typeof v === "string" || typeof v === "number";

function conditions(spec: TableSpec<unknown>, fields: Record<string, FieldOps> | undefined, args: SqlValue[]): string[] | null {
  const out: string[] = [];
  if (!fields) return out;
  for (const [field, ops] of Object.entries(fields)) {
    const kind = spec.kinds.get(field);
    const active =
      (ops.exact !== undefined && ops.exact !== null) ||
      (ops.within !== undefined && ops.within !== null) ||
      (ops.contains !== undefined && ops.contains !== null);
    if (!active) continue;
    if (kind === undefined || field === "body") return null;
    if (ops.exact !== undefined && ops.exact !== null) {
      if (!isScalarArg(ops.exact)) return null;
      out.push(`${q(field)} = ?`);
      args.push(ops.exact);
    }
    if (ops.within !== undefined && ops.within !== null) {
      if (!ops.within.every(isScalarArg)) return null;
      if (ops.within.length === 1) {
        // One value (the usual status filter): an equality, whose index range is already in rowid order.
        out.push(`${q(field)} = ?`);
        args.push(ops.within[0]!);
      } else {
        out.push(`${q(field)} IN (SELECT value FROM json_each(?))`);
        args.push(JSON.stringify(ops.within));
      }
    }
    if (ops.contains !== undefined && ops.contains !== null) {
      // On a text column `contains` is a substring test; numbers are never "contained".
      out.push(kind === "text" ? `instr(${q(field)}, ?) > 0` : "0");
      if (kind === "text") args.push(ops.contains);
    }
  }
  return out;
}

/** The SQL form of a spec, or null when it needs the JS evaluator. */
export function planQuery(spec: TableSpec<unknown>, query: QuerySpec): SqlPlan | null {
  const args: SqlValue[] = [];
  const must = conditions(spec, query.must, args);
  if (must === null) return null;
  const where = conditions(spec, query.where, args);
  if (where === null) return null;
  const parts = [...must];
  if (where.length > 0) parts.push(where.length === 1 ? where[0]! : `(${where.join(query.logic === "or" ? " OR " : " AND ")})`);
  const orderBy = sortClause(spec, query.sort);
  if (orderBy === null) return null;
  return { where: parts.length > 0 ? `WHERE ${parts.join(" AND ")}` : "", args, orderBy };
}

function sortClause(spec: TableSpec<unknown>, sort: QuerySpec["sort"]): string | null {
  const tie = q(spec.order);
  if (!sort) return `ORDER BY ${tie}`;
  const kind = spec.kinds.get(sort.field);
  if (kind === undefined || sort.field === "body") return null;
  const dir = sort.order === "desc" ? "DESC" : "ASC";
  const col = q(sort.field);
  // A NOT NULL column sorts as it is: wrapped in an expression, it could not be read in the order of an
  // index (querySpans' sequence_id order would sort every span of the rollout to return one page).
  if (spec.notNull.has(sort.field)) return `ORDER BY ${col} ${dir}, ${tie}`;
  if (sort.field.endsWith("_time")) return `ORDER BY (${col} IS NULL) ${dir}, ${col} ${dir}, ${tie}`;
  return `ORDER BY COALESCE(${col}, ${kind === "text" ? "''" : "0"}) ${dir}, ${tie}`;
}

/** The prefix of a spec that SQL can always do: the `must` conditions (to narrow the JS fallback's input). */
export function planMust(spec: TableSpec<unknown>, query: QuerySpec): SqlPlan {
  const args: SqlValue[] = [];
  const must = conditions(spec, query.must, args);
  if (must === null || must.length === 0) return { where: "", args: [], orderBy: `ORDER BY ${q(spec.order)}` };
  return { where: `WHERE ${must.join(" AND ")}`, args, orderBy: `ORDER BY ${q(spec.order)}` };
}

/** The row counter of the rollouts with one status (schema.ts `rowCounts`). */
export const statusCounter = (status: string): string => `rollouts.status:${status}`;

/**
 * The row counters (schema.ts `rowCounts`) whose sum is the total of a spec, or null when the spec needs
 * a count: one without any condition is its table's counter, one whose only condition is a status filter
 * on rollouts the counters of those statuses. Every other total is counted (a rollout's spans or
 * attempts: an index range of that rollout).
 */
export function countersFor(spec: TableSpec<unknown>, query: QuerySpec): string[] | null {
  const active: [string, FieldOps][] = [];
  for (const fields of [query.must, query.where]) {
    for (const [field, ops] of Object.entries(fields ?? {})) {
      if ([ops.exact, ops.within, ops.contains].some((v) => v !== undefined && v !== null)) active.push([field, ops]);
    }
  }
  if (active.length === 0) return [spec.table];
  if (active.length > 1 || spec.table !== "rollouts" || active[0]![0] !== "status") return null;
  const { exact, within, contains } = active[0]![1];
  if (contains !== undefined && contains !== null) return null;
  const hasExact = exact !== undefined && exact !== null;
  if (hasExact === (within !== undefined && within !== null)) return null;
  const statuses = hasExact ? [exact] : within!;
  if (!statuses.every((v) => typeof v === "string")) return null;
  return [...new Set(statuses as string[])].map(statusCounter);
}
