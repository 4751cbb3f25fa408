import { describe, expect, it } from "vitest";
import { runScript, runtimesFor } from "./runtimes.ts";

/** Runs test/gpu/cross-runtime.ts under Node (tsx), Deno and Bun; all must train to the same weights. */
const RUNTIMES = runtimesFor("test/gpu/cross-runtime.ts");

interface Report {
  runtime: string;
  skip?: string;
  adapter?: string;
  losses?: number[];
  digest?: string;
}

const reports = new Map<string, Report>();

describe("the WebGPU trainer on every runtime", () => {
  it.for(RUNTIMES)("trains under %s", { timeout: 180_000 }, async ([name, argv], ctx) => {
    const report = await runScript<Report>(argv);
    if (report.skip !== undefined) {
      console.warn(`[cross-runtime] ${name} SKIPPED: ${report.skip}`);
      ctx.skip();
    }
    console.log(`[cross-runtime] ${name}: ${report.adapter}; losses ${report.losses?.join(", ")}; digest ${report.digest}`);
    expect(report.runtime).toBe(name);
    expect(report.losses).toHaveLength(3);
    expect(report.losses!.every(Number.isFinite)).toBe(true);
    reports.set(name, report);
  });

  it("every runtime that ran produced the same losses and bit-identical weights", (ctx) => {
    const ran = [...reports.values()];
    if (ran.length < 2) ctx.skip();
    for (const r of ran.slice(1)) {
      expect(r.losses).toEqual(ran[0].losses);
      expect(r.digest).toBe(ran[0].digest);
    }
  });
});
