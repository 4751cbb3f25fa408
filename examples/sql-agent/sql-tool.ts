/**
 * The SQL agent's database tool: one SELECT at a time against a libSQL file, read-only, with a time
 * limit and a row limit. Whatever the model writes, the answer is a result or a tool error for the model
 * to read, never a crash and never a write:
 *
 * - the file is opened read-only (`mode=ro`) with `PRAGMA query_only`, and only a single statement that
 *   starts with SELECT, WITH or VALUES and that SQLite itself reports as read-only is run: anything else
 *   (INSERT, DROP, ATTACH, PRAGMA, a second statement after `;`) is refused before it runs;
 * - the query runs as the body of a materialized CTE capped at `maxRows + 1` rows, so all of SQLite's work
 *   happens in the one step that the binding runs off the main thread, where `interrupt()` stops it when
 *   the time limit passes (a cross join of huge tables, a runaway recursive CTE); reading the capped rows
 *   afterwards is quick;
 * - malformed SQL comes back as SQLite's own message.
 */
import { pathToFileURL } from "node:url";
import Database from "libsql/promise";
import type { Value } from "./databases.ts";

export interface QueryLimits {
  /** Wall-clock limit of one query [2000 ms]. */
  timeoutMs: number;
  /** Rows kept; a longer result is cut and marked truncated [1000]. */
  maxRows: number;
  /** Longest query text accepted [4000 characters]. */
  maxSqlLength: number;
}

export const DEFAULT_LIMITS: QueryLimits = { timeoutMs: 2000, maxRows: 1000, maxSqlLength: 4000 };

export type QueryResult = { ok: true; columns: string[]; rows: Value[][]; truncated: boolean } | { ok: false; error: string };

/** The part of libsql's promise API used here (its typings say `any`). */
interface PromiseStatement {
  reader: boolean;
  columns(): { name: string }[];
  raw(toggle?: boolean): PromiseStatement;
  all(): Promise<unknown[][]>;
}
interface PromiseDatabase {
  prepare(sql: string): Promise<PromiseStatement>;
  exec(sql: string): Promise<void>;
  interrupt(): void;
  close(): void;
}

const QUERY_KEYWORDS = new Set(["SELECT", "WITH", "VALUES"]);

/**
 * The query with comments and one trailing `;` removed, or why it is refused (not a query; more than one
 * statement). Quoted strings and identifiers are skipped, so a `;` or `--` inside them is text.
 */
export function singleQuery(sql: string): { ok: true; sql: string; keyword: string } | { ok: false; error: string } {
  let out = "";
  let i = 0;
  let ended = -1; // the position of a top-level `;`
  while (i < sql.length) {
    const c = sql[i]!;
    if (c === "-" && sql[i + 1] === "-") {
      const nl = sql.indexOf("\n", i);
      i = nl < 0 ? sql.length : nl;
      out += " ";
      continue;
    }
    if (c === "/" && sql[i + 1] === "*") {
      const close = sql.indexOf("*/", i + 2);
      i = close < 0 ? sql.length : close + 2;
      out += " ";
      continue;
    }
    if (c === "'" || c === '"' || c === "`" || c === "[") {
      const closer = c === "[" ? "]" : c;
      let j = i + 1;
      for (;;) {
        const k = sql.indexOf(closer, j);
        if (k < 0) {
          j = sql.length;
          break;
        }
        if (closer !== "]" && sql[k + 1] === closer)
          j = k + 2; // doubled quote
        else {
          j = k + 1;
          break;
        }
      }
      if (ended >= 0) return { ok: false, error: "only one SQL statement may be run at a time" };
      out += sql.slice(i, j);
      i = j;
      continue;
    }
    if (c === ";") {
      if (ended < 0) ended = out.length;
      i++;
      continue;
    }
    if (ended >= 0 && !/\s/.test(c)) return { ok: false, error: "only one SQL statement may be run at a time" };
    out += c;
    i++;
  }
  const text = out.trim();
  if (text === "") return { ok: false, error: "the query is empty" };
  const keyword = /^[A-Za-z]+/.exec(text)?.[0].toUpperCase() ?? text.slice(0, 10);
  if (!QUERY_KEYWORDS.has(keyword))
    return { ok: false, error: `only read-only SELECT queries may be run (this one starts with ${keyword})` };
  return { ok: true, sql: text, keyword };
}

const sqliteMessage = (e: unknown): string => (e instanceof Error ? e.message : String(e));

/** A cell as the tool reports it: blobs as `x'<hex>'` text. */
function cell(v: unknown): Value {
  if (v === null || typeof v === "number" || typeof v === "string") return v;
  if (typeof v === "bigint") return Number(v);
  if (v instanceof Uint8Array || v instanceof ArrayBuffer) return `x'${Buffer.from(v as Uint8Array).toString("hex")}'`;
  return String(v);
}

/** A read-only connection to one database file. Queries run one at a time. */
export class ReadOnlyDatabase {
  private readonly db: PromiseDatabase;
  private readonly limits: QueryLimits;
  private queue: Promise<unknown> = Promise.resolve();
  private readonly ready: Promise<void>;

  constructor(path: string, limits: Partial<QueryLimits> = {}) {
    this.limits = { ...DEFAULT_LIMITS, ...limits };
    this.db = new (Database as unknown as new (url: string) => PromiseDatabase)(`${pathToFileURL(path).href}?mode=ro`);
    this.ready = this.db.exec("PRAGMA query_only = ON");
    this.ready.catch(() => undefined); // awaited (and thrown) by the first query
  }

  /** Runs one query within the limits; a refused, failed or stopped query is `{ ok: false, error }`. */
  query(sql: string): Promise<QueryResult> {
    const run = this.queue.then(() => this.run(sql));
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async run(sql: string): Promise<QueryResult> {
    await this.ready;
    const { timeoutMs, maxRows, maxSqlLength } = this.limits;
    if (sql.length > maxSqlLength) return { ok: false, error: `the query is longer than ${maxSqlLength} characters` };
    const q = singleQuery(sql);
    if (!q.ok) return q;
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      this.db.interrupt();
    }, timeoutMs);
    try {
      // prepared alone first: SQLite's errors then point into the model's own text, and it names the columns
      const stmt = await this.db.prepare(q.sql);
      if (!stmt.reader) return { ok: false, error: "only read-only SELECT queries may be run" };
      const columns = stmt.columns().map((c) => c.name);
      const capped = await this.db.prepare(
        `WITH capped_result AS MATERIALIZED (SELECT * FROM (\n${q.sql}\n) LIMIT ${maxRows + 1}) SELECT * FROM capped_result`,
      );
      const rows = (await capped.raw().all()).map((r) => r.map(cell));
      const truncated = rows.length > maxRows;
      return { ok: true, columns, rows: truncated ? rows.slice(0, maxRows) : rows, truncated };
    } catch (e) {
      if (timedOut) return { ok: false, error: `the query ran longer than ${timeoutMs} ms and was stopped` };
      return { ok: false, error: sqliteMessage(e) };
    } finally {
      clearTimeout(timer);
    }
  }

  close(): void {
    this.db.close();
  }
}

/** A result as the model reads it: a header line, up to `maxShown` rows, and what was left out. */
export function formatResult(r: QueryResult, maxShown = 20): string {
  if (!r.ok) return `Error: ${r.error}`;
  if (r.rows.length === 0) return `${r.columns.join(" | ")}\n(no rows)`;
  const lines = [
    r.columns.join(" | "),
    ...r.rows.slice(0, maxShown).map((row) => row.map((v) => (v === null ? "NULL" : String(v))).join(" | ")),
  ];
  const hidden = r.rows.length - Math.min(maxShown, r.rows.length);
  if (hidden > 0 || r.truncated) lines.push(`... (${r.truncated ? "more than " : ""}${r.rows.length} rows in all)`);
  return lines.join("\n");
}
