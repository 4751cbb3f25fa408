/** `agl store` options for the server's timeouts and connection limits: defaults, parsing, refusals. */
import { describe, expect, it } from "vitest";
import { parseStoreArgs } from "../../src/cli/store.ts";
import { UsageError } from "../../src/server/config.ts";
import { DEFAULT_SERVE_LIMITS, longestHoldSeconds, serveLimits } from "../../src/platform/index.ts";

describe("server limit options", () => {
  it("default to the documented values", () => {
    expect(parseStoreArgs([]).limits).toEqual({
      headersTimeoutSeconds: 10,
      requestTimeoutSeconds: 60,
      keepAliveTimeoutSeconds: 5,
      maxConnections: 512,
      maxConnectionsPerAddress: 128,
    });
    expect(DEFAULT_SERVE_LIMITS).toEqual(parseStoreArgs([]).limits);
    expect(serveLimits()).toEqual(DEFAULT_SERVE_LIMITS);
  });

  it("take seconds (fractions allowed) and connection counts; the per-address limit follows the cap unless given", () => {
    const c = parseStoreArgs(["--headers-timeout", "2.5", "--request-timeout=30", "--keep-alive-timeout", "1", "--max-connections", "64"]);
    expect(c.limits).toEqual({
      headersTimeoutSeconds: 2.5,
      requestTimeoutSeconds: 30,
      keepAliveTimeoutSeconds: 1,
      maxConnections: 64,
      maxConnectionsPerAddress: 16,
    });
    expect(serveLimits({ maxConnections: 64 }).maxConnectionsPerAddress).toBe(16);
    expect(parseStoreArgs(["--max-connections-per-address", "0"]).limits.maxConnectionsPerAddress).toBe(0);
    expect(parseStoreArgs(["--max-connections", "64", "--max-connections-per-address", "64"]).limits.maxConnectionsPerAddress).toBe(64);
    expect(serveLimits({ maxConnections: 2 }).maxConnectionsPerAddress).toBe(1);
  });

  it.each([
    [["--request-timeout", "0"], /--request-timeout must be a number of seconds/],
    [["--headers-timeout", "-1"], /--headers-timeout must be a number of seconds/],
    [["--keep-alive-timeout", "soon"], /--keep-alive-timeout must be a number of seconds/],
    [["--request-timeout", ""], /--request-timeout must be a number of seconds/],
    [["--max-connections", "0"], /--max-connections must be an integer/],
    [["--max-connections", "1.5"], /--max-connections must be an integer/],
    [["--max-connections-per-address", "-1"], /--max-connections-per-address must be an integer/],
    [["--max-connections-per-address", "many"], /--max-connections-per-address must be an integer/],
  ])("refuses %j", (argv, message) => {
    expect(() => parseStoreArgs(argv)).toThrow(UsageError);
    expect(() => parseStoreArgs(argv)).toThrow(message);
  });

  it("lets node:http hold a long poll past the request timeout (it ends once the body is in)", () => {
    // This suite runs on Node; Bun's hold is checked against a real Bun server in test/reliability/slow-client.test.ts.
    expect(longestHoldSeconds({ requestTimeoutSeconds: 2 })).toBe(Number.POSITIVE_INFINITY);
  });
});
