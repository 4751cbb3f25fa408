import { describe, expect, it } from "vitest";
import { expectSameOnEveryRuntime, RUNTIMES, runReport, type Runtime } from "../runtimes.ts";

/** The Wasm core (cross-runtime.ts) and the CPU model kernels (test/cpu/cross-runtime.ts). */
const SCRIPTS: [string, string][] = [
  ["the core module", "test/wasm/cross-runtime.ts"],
  ["the CPU model kernels", "test/cpu/cross-runtime.ts"],
];

interface Report {
  runtime: string;
  digest: string;
  referenceDigest: string;
  mismatches: string[];
}

describe.each(SCRIPTS)("%s gives identical results under Node, Deno and Bun", (_, script) => {
  const reports = new Map<Runtime, Report>();
  for (const runtime of RUNTIMES) {
    it(`${runtime}: loads the embedded module and matches the reference`, async () => {
      const report = await runReport<Report>(runtime, script, { timeout: 60_000 });
      expect(report.runtime).toBe(runtime);
      expect(report.mismatches).toEqual([]);
      reports.set(runtime, report);
    }, 90_000);
  }
  it("all three digests are equal", () => {
    expect(reports.size).toBe(3);
    expectSameOnEveryRuntime(reports, (r) => r.digest);
  });
});
