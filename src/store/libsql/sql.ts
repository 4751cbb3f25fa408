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

/**
 * Splits `n` rows into statement sizes from a fixed ladder (`max`, then powers of 4), so that multi-row
 * statements come in a handful of shapes the driver keeps prepared, whatever the batch sizes.
 */
export function chunkSizes(n: number, max: number): number[] {
  const out: number[] = [];
  let step = max;
  while (n > 0) {
    if (n >= step) {
      out.push(step);
      n -= step;
      continue;
    }
    let next = 1;
    while (next * 4 <= n && next * 4 < step) next *= 4;
    step = next;
  }
  return out;
}
