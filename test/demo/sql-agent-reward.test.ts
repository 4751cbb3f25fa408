/**
 * The SQL agent's reward (examples/sql-agent/reward.ts): execution match as Spider's execution accuracy,
 * on result sets that are equal or differ by order, duplicates, types, columns and rows, and on the
 * shop database through the read-only tool.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { databasePath } from "../../examples/sql-agent/databases.ts";
import { executionMatch, orderMatters, resultsMatch } from "../../examples/sql-agent/reward.ts";
import { ReadOnlyDatabase } from "../../examples/sql-agent/sql-tool.ts";

describe("resultsMatch", () => {
  it("compares as multisets without ORDER BY and as sequences with it", () => {
    const gold = [
      [1, "a"],
      [2, "b"],
      [2, "b"],
    ];
    expect(
      resultsMatch(
        gold,
        [
          [2, "b"],
          [1, "a"],
          [2, "b"],
        ],
        false,
      ),
    ).toBe(true);
    expect(
      resultsMatch(
        gold,
        [
          [2, "b"],
          [1, "a"],
          [2, "b"],
        ],
        true,
      ),
    ).toBe(false);
    expect(
      resultsMatch(
        gold,
        [
          [1, "a"],
          [2, "b"],
          [2, "b"],
        ],
        true,
      ),
    ).toBe(true);
  });

  it("counts duplicates", () => {
    expect(resultsMatch([[1], [1], [2]], [[1], [2], [2]], false)).toBe(false);
    expect(resultsMatch([[1], [2]], [[1], [2], [2]], false)).toBe(false);
    expect(resultsMatch([["Lyon"], ["Oslo"]], [["Lyon"], ["Oslo"], ["Lyon"]], false)).toBe(false);
  });

  it("compares numbers by value and keeps text and numbers apart", () => {
    expect(resultsMatch([[3]], [[3.0]], false)).toBe(true);
    expect(resultsMatch([[2.5]], [[2.5]], false)).toBe(true);
    expect(resultsMatch([[3]], [["3"]], false)).toBe(false);
    expect(resultsMatch([[null]], [[null]], false)).toBe(true);
    expect(resultsMatch([[null]], [[0]], false)).toBe(false);
    expect(resultsMatch([["null"]], [[null]], false)).toBe(false);
    expect(resultsMatch([[2.5]], [[2]], false)).toBe(false);
  });

  it("accepts the columns in another order, but not other columns", () => {
    expect(
      resultsMatch(
        [
          [1, "a"],
          [2, "b"],
        ],
        [
          ["b", 2],
          ["a", 1],
        ],
        false,
      ),
    ).toBe(true);
    expect(
      resultsMatch(
        [
          [1, "a"],
          [2, "b"],
        ],
        [
          ["a", 1],
          ["b", 2],
        ],
        true,
      ),
    ).toBe(true);
    // the same values per column, but paired differently in the rows
    expect(
      resultsMatch(
        [
          [1, "a"],
          [2, "b"],
        ],
        [
          [1, "b"],
          [2, "a"],
        ],
        false,
      ),
    ).toBe(false);
    expect(
      resultsMatch(
        [
          [1, 2],
          [2, 1],
        ],
        [
          [1, 1],
          [2, 2],
        ],
        false,
      ),
    ).toBe(false);
    expect(
      resultsMatch(
        [
          [1, 1],
          [2, 3],
        ],
        [
          [1, 1],
          [3, 2],
        ],
        false,
      ),
    ).toBe(true);
    expect(resultsMatch([[1, 2]], [[2, 1]], false)).toBe(true);
    expect(resultsMatch([[1]], [[1, 1]], false)).toBe(false);
  });

  it("treats two empty results as equal and an empty one as unequal to any other", () => {
    expect(resultsMatch([], [], false)).toBe(true);
    expect(resultsMatch([], [[1]], false)).toBe(false);
    expect(resultsMatch([[1]], [], false)).toBe(false);
  });

  it("takes order from the gold query's ORDER BY", () => {
    expect(orderMatters("SELECT name FROM t ORDER  BY price DESC LIMIT 1")).toBe(true);
    expect(orderMatters("select name from t order\nby 1")).toBe(true);
    expect(orderMatters("SELECT name FROM t WHERE note = 'border byway'")).toBe(false);
  });
});

describe("executionMatch on the shop database", () => {
  let dir: string;
  let db: ReadOnlyDatabase;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "sql-reward-"));
    db = new ReadOnlyDatabase(databasePath("shop", dir), { timeoutMs: 300, maxRows: 100 });
  });
  afterAll(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const gold = "SELECT COUNT(*) FROM orders JOIN customers ON orders.customer_id = customers.id WHERE customers.city = 'Lyon'";

  it("gives 1 to another query with the same result", async () => {
    expect(await executionMatch(db, gold, gold)).toEqual({ reward: 1, reason: null });
    const other = "select count(o.id) from orders o where o.customer_id in (select id from customers where city = 'Lyon');";
    expect(await executionMatch(db, other, gold)).toEqual({ reward: 1, reason: null });
    expect(
      await executionMatch(
        db,
        "SELECT category, name FROM products WHERE price > 50",
        "SELECT name, category FROM products WHERE price > 50",
      ),
    ).toEqual({ reward: 1, reason: null });
  });

  it("gives 0 to a different result, a failing query, a refused one, one stopped by the limits", async () => {
    expect(await executionMatch(db, gold.replace("Lyon", "Oslo"), gold)).toEqual({ reward: 0, reason: "the results differ" });
    expect(await executionMatch(db, "SELECT COUNT(*) FROM nowhere", gold)).toEqual({ reward: 0, reason: "no such table: nowhere" });
    expect((await executionMatch(db, "DELETE FROM orders", gold)).reason).toMatch(/only read-only/);
    expect((await executionMatch(db, "SELECT COUNT(*) FROM orders a, orders b, orders c, orders d, orders e", gold)).reason).toMatch(
      /ran longer/,
    );
    expect(await executionMatch(db, "SELECT * FROM orders a, orders b", gold)).toEqual({
      reward: 0,
      reason: "the result was cut at the row limit",
    });
    // the right rows in the wrong order, when the question asks for an order
    const ordered = "SELECT name FROM products ORDER BY price DESC";
    expect(await executionMatch(db, "SELECT name FROM products ORDER BY price ASC", ordered)).toEqual({
      reward: 0,
      reason: "the results differ",
    });
    // duplicates the gold query removes
    const cities = "SELECT DISTINCT city FROM customers";
    expect((await executionMatch(db, "SELECT city FROM customers", cities)).reward).toBe(0);
    expect((await executionMatch(db, "SELECT city FROM customers GROUP BY city", cities)).reward).toBe(1);
  });

  it("throws when the gold query itself fails", async () => {
    await expect(executionMatch(db, "SELECT 1", "SELECT * FROM nowhere")).rejects.toThrow(/the gold query fails: no such table: nowhere/);
  });
});
