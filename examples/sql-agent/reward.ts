/**
 * Execution match, Spider's execution accuracy: the agent's query is right when its result equals the
 * gold query's on the database. The rules (docs/agents.md#the-sql-agent):
 *
 * - both queries run through the read-only tool with the same limits; the gold one must succeed (else
 *   the task is broken and this throws); a prediction that is refused, fails, is stopped or is cut at the
 *   row limit scores 0;
 * - two empty results are equal; otherwise the row and column counts must be equal, and some order of
 *   the prediction's columns must make the rows equal: as sequences when the gold query has ORDER BY, as
 *   multisets (duplicates count) when it has not;
 * - values: numbers by value (integer 3 equals real 3.0), text exactly, NULL equals NULL, and the number
 *   3 differs from the text '3'.
 *
 * One departure from Spider's default: DISTINCT is not stripped from both queries before they run, so a
 * prediction that repeats rows the gold query removes is wrong.
 */
import type { Value } from "./databases.ts";
import type { ReadOnlyDatabase } from "./sql-tool.ts";

const key = (v: Value): string => (v === null ? "null" : typeof v === "number" ? `n:${v}` : `s:${v}`);

const sortedColumn = (rows: Value[][], j: number): string => JSON.stringify(rows.map((r) => key(r[j]!)).sort());

/** Whether the gold query's result order is part of its answer. */
export const orderMatters = (goldSql: string): boolean => /\border\s+by\b/i.test(goldSql);

/** Whether two results are the same answer (the rules above). */
export function resultsMatch(gold: Value[][], pred: Value[][], ordered: boolean): boolean {
  if (gold.length === 0 && pred.length === 0) return true;
  if (gold.length !== pred.length) return false;
  const n = gold[0]!.length;
  if (pred[0]!.length !== n) return false;
  // a prediction column can stand for a gold column only if it holds the same values (a row order keeps them)
  const goldCols = Array.from({ length: n }, (_, j) => sortedColumn(gold, j));
  const predCols = Array.from({ length: n }, (_, j) => sortedColumn(pred, j));
  const candidates = goldCols.map((g) => predCols.flatMap((p, j) => (p === g ? [j] : [])));
  const goldRows = gold.map((r) => r.map(key).join("\u0000"));
  const rowsUnder = (perm: number[]) => pred.map((r) => perm.map((j) => key(r[j]!)).join("\u0000"));
  const equalUnder = (perm: number[]): boolean => {
    const rows = rowsUnder(perm);
    if (ordered) return rows.every((r, i) => r === goldRows[i]);
    const a = [...rows].sort(),
      b = [...goldRows].sort();
    return a.every((r, i) => r === b[i]);
  };
  const perm: number[] = [];
  const used = new Set<number>();
  const search = (i: number): boolean => {
    if (i === n) return equalUnder(perm);
    for (const j of candidates[i]!) {
      if (used.has(j)) continue;
      used.add(j);
      perm.push(j);
      if (search(i + 1)) return true;
      perm.pop();
      used.delete(j);
    }
    return false;
  };
  return search(0);
}

export interface Judgement {
  reward: 0 | 1;
  /** Why a prediction scored 0 (null when it matched). */
  reason: string | null;
}

/** The execution-match reward of `predicted` against the gold query, both run on `db`. */
export async function executionMatch(db: ReadOnlyDatabase, predicted: string, gold: string): Promise<Judgement> {
  const g = await db.query(gold);
  if (!g.ok) throw new Error(`the gold query fails: ${g.error} (${gold})`);
  if (g.truncated) throw new Error(`the gold query returns more rows than the row limit (${gold})`);
  const p = await db.query(predicted);
  if (!p.ok) return { reward: 0, reason: p.error };
  if (p.truncated) return { reward: 0, reason: "the result was cut at the row limit" };
  return resultsMatch(g.rows, p.rows, orderMatters(gold)) ? { reward: 1, reason: null } : { reward: 0, reason: "the results differ" };
}
