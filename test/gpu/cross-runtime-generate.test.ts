import { describe, expect, it } from "vitest";
import { runScript, runtimesFor } from "./runtimes.ts";

/** Runs test/gpu/cross-runtime-generate.ts (KV-cached GPU generation) under Node, Deno and Bun: each must give the CPU engine's tokens. */
const RUNTIMES = runtimesFor("test/gpu/cross-runtime-generate.ts");

interface Report {
  runtime: string;
  skip?: string;
  adapter?: string;
  tokens?: number[][];
  sameAsCpu?: boolean;
}

const reports = new Map<string, Report>();

describe("KV-cached WebGPU generation on every runtime", () => {
  it.for(RUNTIMES)("generates under %s", { timeout: 180_000 }, async ([name, argv], ctx) => {
    const report = await runScript<Report>(argv);
    if (report.skip !== undefined) {
      console.warn(`[cross-runtime-generate] ${name} SKIPPED: ${report.skip}`);
      ctx.skip();
    }
    console.log(`[cross-runtime-generate] ${name}: ${report.adapter}; same as the CPU engine: ${report.sameAsCpu}`);
    expect(report.runtime).toBe(name);
    // 6 requests on our preset (8 tokens each), then 3 prompts on each of 3 HF fixtures (6 tokens each)
    expect(report.tokens).toHaveLength(6 + 9);
    expect(report.tokens!.slice(0, 6).every((t) => t.length === 8)).toBe(true);
    expect(report.tokens!.slice(6).every((t) => t.length === 6)).toBe(true);
    expect(report.sameAsCpu).toBe(true);
    reports.set(name, report);
  });

  it("every runtime that ran produced the same tokens", (ctx) => {
    const ran = [...reports.values()];
    if (ran.length < 2) ctx.skip();
    for (const r of ran.slice(1)) expect(r.tokens).toEqual(ran[0].tokens);
  });
});
