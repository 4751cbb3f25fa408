import { describe, expect, it } from "vitest";
import { expectSameOnEveryRuntime, RUNTIMES, runReport, type Runtime } from "../runtimes.ts";

/** Runs test/gpu/lora-cross-runtime.ts under Node (tsx), Deno and Bun: on each, the LoRA steps on WebGPU
 * must match the CPU reference trainer; across them, the adapters must be bit-identical. */
const SCRIPT = "test/gpu/lora-cross-runtime.ts";

interface Report {
  runtime: string;
  skip?: string;
  adapter?: string;
  losses?: number[];
  cpuLosses?: number[];
  logProbError?: number;
  paramError?: number;
  digest?: string;
}

const reports = new Map<Runtime, Report>();

describe("LoRA training on WebGPU on every runtime", () => {
  it.for(RUNTIMES)("equals the CPU reference under %s", { timeout: 180_000 }, async (runtime, ctx) => {
    // exit code 3: the script found no adapter and said why ({"skip": reason})
    const report = await runReport<Report>(runtime, SCRIPT, { codes: [0, 3], timeout: 150_000 });
    if (report.skip !== undefined) {
      console.warn(`[lora cross-runtime] ${runtime} SKIPPED: ${report.skip}`);
      ctx.skip();
    }
    console.log(
      `[lora cross-runtime] ${runtime}: ${report.adapter}; losses ${report.losses?.join(", ")} (CPU ${report.cpuLosses?.join(", ")}); log-prob error ${report.logProbError}, adapter error ${report.paramError}; digest ${report.digest}`,
    );
    expect(report.runtime).toBe(runtime);
    expect(report.losses).toHaveLength(3);
    report.losses!.forEach((loss, i) => expect(loss).toBeCloseTo(report.cpuLosses![i], 5));
    // three Adam steps at lr 1e-2 move entries by up to ~3e-2; the GPU ends within rounding of the CPU
    expect(report.paramError).toBeLessThan(1e-4);
    expect(report.logProbError).toBeLessThan(2e-5);
    reports.set(runtime, report);
  });

  it("every runtime that ran produced the same losses and a bit-identical adapter", (ctx) => {
    if (reports.size < 2) ctx.skip();
    expectSameOnEveryRuntime(reports, (r) => ({ losses: r.losses, digest: r.digest }));
  });
});
