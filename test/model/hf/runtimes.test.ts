// The golden Hugging Face fixtures loaded from their folders under Node, Deno and Bun (each runtime's
// ranged file reads): golden logits within 1e-4 and the golden greedy tokens on all three.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT, RUNTIMES, runReport } from "../../runtimes.ts";

const FIXTURES = ["llama-tied-llama3", "llama-untied-gqa-sharded", "qwen2-bias-tied", "qwen3-qknorm-headdim"];

type Report = Record<string, { worst: number; greedy: number[] }> & { runtime: string };

describe("loadPretrained under Node, Deno and Bun", () => {
  it.each(RUNTIMES)(
    "%s: every fixture gives the golden logits and greedy tokens",
    async (runtime) => {
      const report = await runReport<Report>(runtime, "test/model/hf/cross-runtime-load.ts", { timeout: 90_000 });
      expect(report.runtime).toBe(runtime);
      for (const fixture of FIXTURES) {
        const golden = JSON.parse(readFileSync(join(ROOT, "test/fixtures/hf", fixture, "golden.json"), "utf8")) as { greedy: number[] };
        expect(report[fixture].worst, fixture).toBeLessThan(1e-4);
        expect(report[fixture].greedy, fixture).toEqual(golden.greedy);
      }
    },
    120_000,
  );
});
