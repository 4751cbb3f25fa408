import { describe, expect, it } from "vitest";
import { expectSameOnEveryRuntime, RUNTIMES, runReport, type Runtime } from "../runtimes.ts";

/** Runs test/gpu/cross-runtime.ts under Node (tsx), Deno and Bun; all must train to the same weights. */
const SCRIPT = "test/gpu/cross-runtime.ts";

interface Report {
  runtime: string;
  skip?: string;
  adapter?: string;
  losses?: number[];
  digest?: string;
}

const reports = new Map<Runtime, Report>();

describe("the WebGPU trainer on every runtime", () => {
  it.for(RUNTIMES)("trains under %s", { timeout: 180_000 }, async (runtime, ctx) => {
    // exit code 3: the script found no adapter and said why ({"skip": reason})
    const report = await runReport<Report>(runtime, SCRIPT, { codes: [0, 3], timeout: 150_000 });
    if (report.skip !== undefined) {
      console.warn(`[cross-runtime] ${runtime} SKIPPED: ${report.skip}`);
      ctx.skip();
    }
    console.log(`[cross-runtime] ${runtime}: ${report.adapter}; losses ${report.losses?.join(", ")}; digest ${report.digest}`);
    expect(report.runtime).toBe(runtime);
    expect(report.losses).toHaveLength(3);
    expect(report.losses!.every(Number.isFinite)).toBe(true);
    reports.set(runtime, report);
  });

  it("every runtime that ran produced the same losses and bit-identical weights", (ctx) => {
    if (reports.size < 2) ctx.skip();
    expectSameOnEveryRuntime(reports, (r) => ({ losses: r.losses, digest: r.digest }));
  });
});
