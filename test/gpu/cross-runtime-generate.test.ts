import { describe, expect, it } from "vitest";
import { expectSameOnEveryRuntime, RUNTIMES, runReport, type Runtime } from "../runtimes.ts";

/** Runs test/gpu/cross-runtime-generate.ts (KV-cached GPU generation) under Node, Deno and Bun: each must give the CPU engine's tokens. */
const SCRIPT = "test/gpu/cross-runtime-generate.ts";

interface Report {
  runtime: string;
  skip?: string;
  adapter?: string;
  tokens?: number[][];
  sameAsCpu?: boolean;
}

const reports = new Map<Runtime, Report>();

describe("KV-cached WebGPU generation on every runtime", () => {
  it.for(RUNTIMES)("generates under %s", { timeout: 180_000 }, async (runtime, ctx) => {
    // exit code 3: the script found no adapter and said why ({"skip": reason})
    const report = await runReport<Report>(runtime, SCRIPT, { codes: [0, 3], timeout: 150_000 });
    if (report.skip !== undefined) {
      console.warn(`[cross-runtime-generate] ${runtime} SKIPPED: ${report.skip}`);
      ctx.skip();
    }
    console.log(`[cross-runtime-generate] ${runtime}: ${report.adapter}; same as the CPU engine: ${report.sameAsCpu}`);
    expect(report.runtime).toBe(runtime);
    // 6 requests on our preset (8 tokens each), then 3 prompts on each of 3 HF fixtures (6 tokens each)
    expect(report.tokens).toHaveLength(6 + 9);
    expect(report.tokens!.slice(0, 6).every((t) => t.length === 8)).toBe(true);
    expect(report.tokens!.slice(6).every((t) => t.length === 6)).toBe(true);
    expect(report.sameAsCpu).toBe(true);
    reports.set(runtime, report);
  });

  it("every runtime that ran produced the same tokens", (ctx) => {
    if (reports.size < 2) ctx.skip();
    expectSameOnEveryRuntime(reports, (r) => r.tokens);
  });
});
