/** Small SQL text helpers shared by the libSQL storage and its row cache. */

/**
 * Bind parameters per statement. SQLite allows 32,766 (libSQL servers too); multi-row statements stay
 * far below it so one statement never fails on the limit.
 */
export const MAX_BIND_PARAMS = 8000;

export const placeholders = (cols: number): string => `(${new Array(cols).fill("?").join(", ")})`;
/**
 * `(?, ?), (?, ?), ...`: `rows` groups of `cols` placeholders. Memoised: the driver finds its prepared
 * statement by the SQL text, and a string built anew is hashed (all of it) on every lookup.
 */
export function rowsSql(cols: number, rows: number): string {
  const key = cols * 100_000 + rows;
  let sql = rowsTexts.get(key);
  if (sql === undefined) {
    sql = new Array(rows).fill(placeholders(cols)).join(", ");
    rowsTexts.set(key, sql);
  }
  return sql;
}
const rowsTexts = new Map<number, string>();

/** `head + rowsSql(cols, rows) + tail`, memoised per row count (see rowsSql). */
export function multiRowSql(head: string, cols: number, tail: string): (rows: number) => string {
  const texts = new Map<number, string>();
  return (rows) => {
    let sql = texts.get(rows);
    if (sql === undefined) {
      sql = head + rowsSql(cols, rows) + tail;
      texts.set(rows, sql);
    }
    return sql;
  };
}
export const quoted = (cols: readonly string[]): string => cols.map((c) => `"${c}"`).join(", ");

/** Row counts up to this get a statement of their own size (the common small batches: one statement). */
export const EXACT_ROWS = 32;

/**
 * Splits `n` rows into statement sizes so that multi-row statements come in a bounded set of shapes the
 * driver keeps prepared, whatever the batch sizes: `max`-row chunks, then powers of 2, and the last
 * <= EXACT_ROWS rows as one statement. Each statement costs ~10-30 us before its first row, so small
 * batches (a rollout's 13 spans, a group's few rollouts) go out whole rather than split.
 */
export function chunkSizes(n: number, max: number): number[] {
  const out: number[] = [];
  while (n > 0) {
    let size: number;
    if (n >= max) size = max;
    else if (n <= EXACT_ROWS) size = n;
    else for (size = EXACT_ROWS; size * 2 <= n; size *= 2);
    out.push(size);
    n -= size;
  }
  return out;
}
