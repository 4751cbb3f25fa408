/** `agl store` options: defaults, flags over environment, and clear refusals. */
import { describe, expect, it } from "vitest";
import { parseStoreArgs } from "../../src/cli/store.ts";
import { DEFAULT_DB, DEFAULT_HOST, DEFAULT_PORT, UsageError } from "../../src/server/config.ts";
import { normaliseDb } from "../../src/server/open-store.ts";

const env = (vars: Record<string, string>) => (name: string) => vars[name];

describe("parseStoreArgs", () => {
  it("defaults to loopback, port 4747 and the embedded libSQL file, no token", () => {
    expect(parseStoreArgs([])).toMatchObject({
      host: DEFAULT_HOST,
      port: DEFAULT_PORT,
      db: DEFAULT_DB,
      token: null,
      corsOrigins: [],
      logLevel: "info",
      testClock: false,
    });
    expect([DEFAULT_HOST, DEFAULT_PORT, DEFAULT_DB]).toEqual(["127.0.0.1", 4747, "file:agl-store.db"]);
  });

  it("reads both --flag value and --flag=value, repeats --cors-origin, accepts upstream log levels", () => {
    const c = parseStoreArgs([
      "--host",
      "0.0.0.0",
      "--port=5000",
      "--db",
      ":memory:",
      "--token=T",
      "--cors-origin",
      "http://a",
      "--cors-origin=*",
      "--log-level",
      "WARNING",
    ]);
    expect(c).toMatchObject({
      host: "0.0.0.0",
      port: 5000,
      db: ":memory:",
      token: "T",
      corsOrigins: ["http://a", "*"],
      logLevel: "warning",
    });
  });

  it("takes page caps from flags or the environment (none given: no cap, as upstream)", () => {
    expect(parseStoreArgs([])).toMatchObject({ pageSize: null, maxPageSize: null, maxPageChars: null });
    expect(parseStoreArgs(["--page-size", "50", "--max-page-size=500", "--max-page-chars", "4096"])).toMatchObject({
      pageSize: 50,
      maxPageSize: 500,
      maxPageChars: 4096,
    });
    const e = env({ AGL_STORE_PAGE_SIZE: "10", AGL_STORE_MAX_PAGE_SIZE: "100", AGL_STORE_MAX_PAGE_CHARS: "999" });
    expect(parseStoreArgs([], e)).toMatchObject({ pageSize: 10, maxPageSize: 100, maxPageChars: 999 });
    expect(parseStoreArgs(["--max-page-size", "20"], e)).toMatchObject({ pageSize: 10, maxPageSize: 20 });
    expect(() => parseStoreArgs([], env({ AGL_STORE_MAX_PAGE_SIZE: "lots" }))).toThrow(/AGL_STORE_MAX_PAGE_SIZE must be an integer/);
  });

  it("takes the environment when no flag is given, and flags win over it", () => {
    const e = env({ AGL_STORE_TOKEN: "from-env", AGL_SERVER_PORT: "6000", AGL_STORE_DB: "file:/data/x.db", AGL_SERVER_HOST: "::1" });
    expect(parseStoreArgs([], e)).toMatchObject({ token: "from-env", port: 6000, db: "file:/data/x.db", host: "::1" });
    expect(parseStoreArgs(["--token", "flag", "--port", "7000"], e)).toMatchObject({ token: "flag", port: 7000 });
  });

  it.each([
    [["--port", "http"], /--port must be an integer/],
    [["--port", "70000"], /--port must be an integer/],
    [["--port"], /--port needs a value/],
    [["--log-level", "loud"], /--log-level must be one of/],
    [["--prot", "1"], /unknown option "--prot"/],
    [["--body-limit", "0"], /--body-limit must be an integer/],
    [["--max-page-size", "0"], /--max-page-size must be an integer/],
    [["--page-size", "20", "--max-page-size", "10"], /--page-size \(20\) must not exceed --max-page-size \(10\)/],
    [["--max-page-chars", "0"], /--max-page-chars must be an integer/],
  ])("refuses %j", (argv, message) => {
    expect(() => parseStoreArgs(argv)).toThrow(UsageError);
    expect(() => parseStoreArgs(argv)).toThrow(message);
  });

  it("treats a plain path as an embedded file and keeps URLs and :memory: as they are", () => {
    expect(normaliseDb("data/store.db")).toBe("file:data/store.db");
    expect(normaliseDb("file:x.db")).toBe("file:x.db");
    expect(normaliseDb("libsql://db.example.org")).toBe("libsql://db.example.org");
    expect(normaliseDb(":memory:")).toBe(":memory:");
    expect(normaliseDb("memory")).toBe("memory");
  });
});
