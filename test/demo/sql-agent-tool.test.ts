/**
 * The SQL agent's database tool (examples/sql-agent/sql-tool.ts): writes, ATTACH, PRAGMA and second
 * statements are refused and leave the file byte-for-byte unchanged; a query past the time limit is
 * stopped; a long result is cut at the row limit; malformed SQL is a tool error; the connection keeps
 * answering after each of them. Also the databases and tasks (databases.ts, tasks.ts).
 */
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DB_IDS, databasePath, tables } from "../../examples/sql-agent/databases.ts";
import { formatResult, ReadOnlyDatabase, singleQuery } from "../../examples/sql-agent/sql-tool.ts";
import { HELD_OUT_SIZE, heldOutTasks, trainTasks } from "../../examples/sql-agent/tasks.ts";

let dir: string;
let path: string;
let db: ReadOnlyDatabase;
const digest = () => createHash("sha256").update(readFileSync(path)).digest("hex");

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "sql-tool-"));
  path = databasePath("shop", dir);
  db = new ReadOnlyDatabase(path, { timeoutMs: 300, maxRows: 50 });
});
afterAll(() => {
  db.close();
  rmSync(dir, { recursive: true, force: true });
});

const error = async (sql: string): Promise<string> => {
  const r = await db.query(sql);
  if (r.ok) throw new Error(`expected a tool error for ${sql}, got ${JSON.stringify(r)}`);
  return r.error;
};

describe("the database tool", () => {
  it("answers a SELECT with its columns and rows", async () => {
    const r = await db.query("SELECT name, price FROM products WHERE category = 'toys' ORDER BY price DESC;");
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.columns).toEqual(["name", "price"]);
    const toys = tables("shop")
      .find((t) => t.name === "products")!
      .rows.filter((row) => row[2] === "toys")
      .map((row) => [row[1], row[3]])
      .sort((a, b) => (b[1] as number) - (a[1] as number));
    expect(r.rows).toEqual(toys);
    expect(r.truncated).toBe(false);
  });

  it("refuses writes, schema changes, ATTACH, PRAGMA and a second statement, and the file stays as it was", async () => {
    const before = digest();
    const attached = join(dir, "attached.db");
    const refused = [
      "INSERT INTO customers VALUES (99, 'Eve', 'Oslo', 2024)",
      "UPDATE products SET price = 0",
      "DELETE FROM orders",
      "DROP TABLE orders",
      "CREATE TABLE x (a)",
      `ATTACH DATABASE '${attached}' AS other`,
      "PRAGMA query_only = OFF",
      "SELECT 1; DROP TABLE orders",
      "SELECT 1; SELECT 2",
      "WITH gone AS (SELECT 1) DELETE FROM orders",
      "BEGIN",
      "VACUUM",
    ];
    for (const sql of refused) expect(await error(sql), sql).toMatch(/only (read-only SELECT queries|one SQL statement)|syntax error/);
    expect(await error("SELECT 1; DROP TABLE orders")).toBe("only one SQL statement may be run at a time");
    expect(await error("DELETE FROM orders")).toBe("only read-only SELECT queries may be run (this one starts with DELETE)");
    expect(existsSync(attached)).toBe(false);
    expect(digest()).toBe(before);
    const count = await db.query("SELECT COUNT(*) FROM orders");
    expect(count.ok && count.rows[0]![0]).toBe(tables("shop").find((t) => t.name === "orders")!.rows.length);
  });

  it("reads a `;` or `--` inside quotes as text, and a trailing `;` or comment as nothing", async () => {
    expect(singleQuery("SELECT 'a;b' AS x; -- done")).toEqual({ ok: true, sql: "SELECT 'a;b' AS x", keyword: "SELECT" });
    expect(singleQuery('SELECT "--" FROM t')).toMatchObject({ ok: true });
    expect(singleQuery("SELECT 1 /* ; DROP TABLE t */")).toMatchObject({ ok: true });
    expect(singleQuery("SELECT 1; /* c */ DROP TABLE t")).toEqual({ ok: false, error: "only one SQL statement may be run at a time" });
    expect(singleQuery("  -- only a comment")).toEqual({ ok: false, error: "the query is empty" });
    const r = await db.query("SELECT 'it''s; fine' AS t;");
    expect(r).toEqual({ ok: true, columns: ["t"], rows: [["it's; fine"]], truncated: false });
  });

  it("refuses a database that is not there instead of creating it", () => {
    const missing = join(dir, "missing.db");
    expect(() => new ReadOnlyDatabase(missing)).toThrow();
    expect(existsSync(missing)).toBe(false);
  });

  it("stops a query past the time limit (a huge cross join, a runaway recursive CTE) and keeps answering", async () => {
    const started = performance.now();
    expect(await error("SELECT COUNT(*) FROM orders a, orders b, orders c, orders d, orders e")).toBe(
      "the query ran longer than 300 ms and was stopped",
    );
    expect(await error("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r")).toMatch(/ran longer/);
    // a sparse result: rows come rarely, the first after a long search (all of it inside the stoppable step)
    expect(await error("SELECT a.id FROM orders a, orders b, orders c, orders d WHERE a.id + b.id + c.id + d.id = 361 + a.id * 0")).toMatch(
      /ran longer/,
    );
    expect(performance.now() - started).toBeLessThan(10_000);
    const r = await db.query("SELECT COUNT(*) FROM customers");
    expect(r.ok).toBe(true);
  });

  it("cuts a long result at the row limit and says so", async () => {
    const r = await db.query("SELECT a.id, b.id FROM orders a, orders b, orders c");
    expect(r.ok && r.rows.length).toBe(50);
    expect(r.ok && r.truncated).toBe(true);
    expect(formatResult(r, 3).split("\n")).toEqual(["id | id", "1 | 1", "1 | 1", "1 | 1", "... (more than 50 rows in all)"]);
  });

  it("returns malformed SQL, unknown tables and over-long queries as tool errors", async () => {
    expect(await error("SELECT name FRM customers")).toBe('near "customers": syntax error');
    expect(await error("SELEC name FROM customers")).toBe("only read-only SELECT queries may be run (this one starts with SELEC)");
    expect(await error("SELECT nope FROM customers")).toBe("no such column: nope");
    expect(await error("SELECT * FROM missing_table")).toBe("no such table: missing_table");
    expect(await error("SELECT (((")).toMatch(/syntax error|incomplete input/);
    expect(await error(`SELECT ${"1 + ".repeat(2000)}1`)).toBe("the query is longer than 4000 characters");
    expect(await error("SELECT load_extension('/tmp/x.so')")).toBe("not authorized");
    expect(formatResult({ ok: false, error: "no such column: nope" })).toBe("Error: no such column: nope");
  });
});

describe("the databases and tasks", () => {
  it("builds the same rows every time, and every gold query runs", async () => {
    const other = mkdtempSync(join(tmpdir(), "sql-dbs-"));
    try {
      for (const id of DB_IDS) {
        const a = new ReadOnlyDatabase(databasePath(id, dir)),
          b = new ReadOnlyDatabase(databasePath(id, other));
        for (const t of tables(id)) expect(await b.query(`SELECT * FROM ${t.name}`)).toEqual(await a.query(`SELECT * FROM ${t.name}`));
        a.close();
        b.close();
      }
      const conns = Object.fromEntries(DB_IDS.map((id) => [id, new ReadOnlyDatabase(databasePath(id, other))]));
      let withRows = 0;
      const all = [...heldOutTasks(), ...trainTasks(200, 7)];
      for (const t of all) {
        const r = await conns[t.db_id]!.query(t.query);
        expect(r.ok, t.query).toBe(true);
        if (r.ok && r.rows.length > 0 && r.rows[0]![0] !== null) withRows++;
      }
      expect(withRows / all.length).toBeGreaterThan(0.95);
      for (const c of Object.values(conns)) c.close();
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
  });

  it("keeps a fixed held-out split that training never draws from", () => {
    const held = heldOutTasks();
    expect(held).toHaveLength(HELD_OUT_SIZE);
    expect(new Set(held.map((t) => t.question)).size).toBe(HELD_OUT_SIZE);
    expect(new Set(held.map((t) => t.db_id))).toEqual(new Set(DB_IDS));
    const banned = new Set(held.map((t) => t.question));
    const train = trainTasks(500, 1);
    expect(train.some((t) => banned.has(t.question))).toBe(false);
    expect(trainTasks(500, 1)).toEqual(train);
    expect(trainTasks(50, 2)).not.toEqual(train.slice(0, 50));
  });
});
