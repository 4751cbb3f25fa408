import { describe, expect, it } from "vitest";
import { runScript, runtimesFor } from "./runtimes.ts";

/** Runs test/gpu/lora-cross-runtime.ts under Node (tsx), Deno and Bun: on each, the LoRA steps on WebGPU
 * must match the CPU reference trainer; across them, the adapters must be bit-identical. */
const RUNTIMES = runtimesFor("test/gpu/lora-cross-runtime.ts");

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

const reports = new Map<string, Report>();

describe("LoRA training on WebGPU on every runtime", () => {
  it.for(RUNTIMES)("equals the CPU reference under %s", { timeout: 180_000 }, async ([name, argv], ctx) => {
    const report = await runScript<Report>(argv);
    if (report.skip !== undefined) {
      console.warn(`[lora cross-runtime] ${name} SKIPPED: ${report.skip}`);
      ctx.skip();
    }
    console.log(
      `[lora cross-runtime] ${name}: ${report.adapter}; losses ${report.losses?.join(", ")} (CPU ${report.cpuLosses?.join(", ")}); log-prob error ${report.logProbError}, adapter error ${report.paramError}; digest ${report.digest}`,
    );
    expect(report.runtime).toBe(name);
    expect(report.losses).toHaveLength(3);
    report.losses!.forEach((loss, i) => expect(loss).toBeCloseTo(report.cpuLosses![i], 5));
    // three Adam steps at lr 1e-2 move entries by up to ~3e-2; the GPU ends within rounding of the CPU
    expect(report.paramError).toBeLessThan(1e-4);
    expect(report.logProbError).toBeLessThan(2e-5);
    reports.set(name, report);
  });

  it("every runtime that ran produced the same losses and a bit-identical adapter", (ctx) => {
    const ran = [...reports.values()];
    if (ran.length < 2) ctx.skip();
    for (const r of ran.slice(1)) {
      expect(r.losses).toEqual(ran[0].losses);
      expect(r.digest).toBe(ran[0].digest);
    }
  });
});
