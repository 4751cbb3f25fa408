/** The in-memory query evaluator (query.ts): filter, sort and page semantics of docs/store.md#filters-sorting-and-pages. */
import { describe, expect, it } from "vitest";
import { compileFilter, runQuery, sortRows } from "../../src/store/query.ts";
import { ValidationError } from "../../src/types/index.ts";

type Row = { id: string; mode: string | null; rank: number | null; end_time: number | null; tags?: string[] };
const rows: Row[] = [
  { id: "a", mode: "train", rank: 3, end_time: 5, tags: ["x", "y"] },
  { id: "b", mode: null, rank: null, end_time: null },
  { id: "c", mode: "val", rank: 1, end_time: 2, tags: ["y"] },
  { id: "d", mode: "train", rank: 3, end_time: null },
];
const ids = (rs: Row[]) => rs.map((r) => r.id);

describe("sortRows", () => {
  it("sorts a null *_time last in asc and first in desc", () => {
    expect(ids(sortRows(rows, { field: "end_time", order: "asc" }))).toEqual(["c", "a", "b", "d"]);
    expect(ids(sortRows(rows, { field: "end_time", order: "desc" }))).toEqual(["b", "d", "a", "c"]);
  });

  it("sorts other nulls as the empty value of the column (first in asc, last in desc)", () => {
    expect(ids(sortRows(rows, { field: "mode", order: "asc" }))).toEqual(["b", "a", "d", "c"]);
    expect(ids(sortRows(rows, { field: "rank", order: "asc" }))).toEqual(["b", "c", "a", "d"]);
    expect(ids(sortRows(rows, { field: "rank", order: "desc" }))).toEqual(["a", "d", "c", "b"]);
  });

  it("keeps ties in insertion order in both directions", () => {
    expect(ids(sortRows(rows, { field: "mode", order: "desc" }))).toEqual(["c", "a", "d", "b"]);
  });

  it("compares strings by code point, not locale", () => {
    const rs = [{ k: "beta-critical" }, { k: "beta optional" }, { k: "Zeta" }, { k: "alpha" }];
    expect(sortRows(rs, { field: "k", order: "asc" }).map((r) => r.k)).toEqual(["Zeta", "alpha", "beta optional", "beta-critical"]);
  });

  it("returns an already sorted input as it is, and sorts a nearly sorted one", () => {
    const sorted = Array.from({ length: 1000 }, (_, i) => ({ seq: i }));
    expect(sortRows(sorted, { field: "seq", order: "asc" })).toBe(sorted);
    const swapped = sorted.map((r, i) => ({ seq: i === 500 ? 501 : i === 501 ? 500 : r.seq }));
    expect(sortRows(swapped, { field: "seq", order: "asc" }).map((r) => r.seq)).toEqual(sorted.map((r) => r.seq));
    expect(sortRows(sorted, { field: "seq", order: "desc" })[0]!.seq).toBe(999);
  });

  it("rejects fields whose values cannot be ordered", () => {
    expect(() => sortRows([{ o: { a: 1 } }, { o: { a: 2 } }], { field: "o", order: "asc" })).toThrow(ValidationError);
    expect(() => sortRows([{ v: 1 }, { v: "x" }], { field: "v", order: "asc" })).toThrow(ValidationError);
  });
});

describe("compileFilter", () => {
  it("ignores operators whose operand is null, so no condition matches everything with either logic", () => {
    expect(rows.filter(compileFilter({ where: { mode: { exact: null } }, logic: "and" }))).toHaveLength(4);
    expect(rows.filter(compileFilter({ where: { mode: { exact: null, contains: null } }, logic: "or" }))).toHaveLength(4);
  });

  it("within [] matches nothing; contains tests substrings and array elements; a null field never matches", () => {
    expect(rows.filter(compileFilter({ where: { mode: { within: [] } } }))).toEqual([]);
    expect(ids(rows.filter(compileFilter({ where: { mode: { contains: "rai" } } })))).toEqual(["a", "d"]);
    expect(ids(rows.filter(compileFilter({ where: { tags: { contains: "y" } } })))).toEqual(["a", "c"]);
    expect(ids(rows.filter(compileFilter({ where: { mode: { within: ["val", null] } } })))).toEqual(["b", "c"]);
  });

  it("combines where-conditions with and/or, and always ANDs the must-conditions", () => {
    const or = compileFilter({ where: { mode: { exact: "val" }, rank: { exact: 3 } }, logic: "or" });
    expect(ids(rows.filter(or))).toEqual(["a", "c", "d"]);
    const scoped = compileFilter({
      must: { id: { within: ["a", "b", "c"] } },
      where: { mode: { exact: "val" }, rank: { exact: 3 } },
      logic: "or",
    });
    expect(ids(rows.filter(scoped))).toEqual(["a", "c"]);
    const and = compileFilter({ where: { mode: { exact: "train" }, rank: { exact: 3 } }, logic: "and" });
    expect(ids(rows.filter(and))).toEqual(["a", "d"]);
  });
});

describe("runQuery pagination", () => {
  it("limit -1 gives all, 0 gives none with the right total, an offset past the end gives []", () => {
    const spec = { where: { mode: { exact: "train" } }, sort: { field: "id", order: "desc" as const } };
    expect(runQuery(rows, { ...spec, limit: -1, offset: 0 })).toEqual({ items: [rows[3], rows[0]], limit: -1, offset: 0, total: 2 });
    expect(runQuery(rows, { ...spec, limit: 0, offset: 0 })).toEqual({ items: [], limit: 0, offset: 0, total: 2 });
    expect(runQuery(rows, { ...spec, limit: 5, offset: 9 })).toEqual({ items: [], limit: 5, offset: 9, total: 2 });
    expect(runQuery(rows, { ...spec, limit: 1, offset: 1 }).items).toEqual([rows[0]]);
  });
});
