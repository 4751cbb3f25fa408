import { describe, expect, it } from "vitest";
import { expectSameOnEveryRuntime, RUNTIMES, runReport, type Runtime } from "../runtimes.ts";

type Report = Record<string, string | boolean>;

describe("the CPU model gives bit-identical results under Node, Deno and Bun", () => {
  const reports = new Map<Runtime, Report>();
  for (const runtime of RUNTIMES) {
    it(`${runtime}: init, training steps, checkpoint and sampling run`, async () => {
      const report = await runReport<Report>(runtime, "test/model/cross-runtime.ts", { timeout: 60_000 });
      expect(report.runtime).toBe(runtime);
      expect(report.checkpointRoundTrip).toBe(true);
      reports.set(runtime, report);
    }, 90_000);
  }
  it("every digest is equal across the three", () => {
    expect(reports.size).toBe(3);
    expectSameOnEveryRuntime(reports, ({ runtime: _, ...rest }) => rest);
  });
});
