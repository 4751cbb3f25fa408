/** Small SQL text helpers shared by the libSQL storage and its row cache. */

/**
 * Bind parameters per statement. SQLite allows 32,766 (libSQL servers too); multi-row statements stay
 * far below it so one statement never fails on the limit.
 */
export const MAX_BIND_PARAMS = 8000;

export const placeholders = (cols: number): string => `(${new Array(cols).fill("?").join(", ")})`;
export const rowsSql = (cols: number, rows: number): string => new Array(rows).fill(placeholders(cols)).join(", ");
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
