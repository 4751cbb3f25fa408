/** `agl store --workers N` and AGL_STORE_WORKERS: one process by default, a flag over the environment, clear refusals. */
import { describe, expect, it } from "vitest";
import { parseStoreArgs } from "../../src/cli/store.ts";
import { UsageError } from "../../src/server/config.ts";
import { isPrivateDb } from "../../src/server/open-store.ts";

const env = (vars: Record<string, string>) => (name: string) => vars[name];

describe("--workers", () => {
  it("is 1 unless given; the flag wins over AGL_STORE_WORKERS", () => {
    expect(parseStoreArgs([]).workers).toBe(1);
    expect(parseStoreArgs(["--workers", "4"]).workers).toBe(4);
    expect(parseStoreArgs([], env({ AGL_STORE_WORKERS: "3" })).workers).toBe(3);
    expect(parseStoreArgs(["--workers=2"], env({ AGL_STORE_WORKERS: "3" })).workers).toBe(2);
  });

  it.each([
    [["--workers", "0"], {}, /--workers must be an integer/],
    [["--workers", "two"], {}, /--workers must be an integer/],
    [["--workers", "1.5"], {}, /--workers must be an integer/],
    [[], { AGL_STORE_WORKERS: "0" }, /AGL_STORE_WORKERS must be an integer/],
  ])("refuses %j %j", (argv, vars, message) => {
    expect(() => parseStoreArgs(argv, env(vars))).toThrow(UsageError);
    expect(() => parseStoreArgs(argv, env(vars))).toThrow(message);
  });

  it("tells the databases no other process can share", () => {
    expect(["memory", ":memory:", "file::memory:"].map(isPrivateDb)).toEqual([true, true, true]);
    expect(["store.db", "file:store.db", "libsql://db.example.org"].map(isPrivateDb)).toEqual([false, false, false]);
  });
});
