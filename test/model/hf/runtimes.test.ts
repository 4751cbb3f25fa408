// The golden Hugging Face fixtures loaded from their folders under Node, Deno and Bun (each runtime's
// ranged file reads): golden logits within 1e-4 and the golden greedy tokens on all three.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = join(dirname(fileURLToPath(import.meta.url)), "../../..");
const script = join(root, "test/model/hf/cross-runtime-load.ts");
const bin = (name: string): string => join(root, "node_modules/.bin", name);
const FIXTURES = ["llama-tied-llama3", "llama-untied-gqa-sharded", "qwen2-bias-tied", "qwen3-qknorm-headdim"];

const RUNTIMES: Array<[string, string, string[]]> = [
  ["node", process.execPath, ["--import", "tsx", script]],
  ["deno", bin("deno"), ["run", "-A", script]],
  ["bun", bin("bun"), [script]],
];

describe("loadPretrained under Node, Deno and Bun", () => {
  it.each(RUNTIMES)(
    "%s: every fixture gives the golden logits and greedy tokens",
    (name, cmd, args) => {
      const stdout = execFileSync(cmd, args, { cwd: root, encoding: "utf8", timeout: 90_000, env: { ...process.env, NO_COLOR: "1" } });
      const report = JSON.parse(stdout.trim().split("\n").pop()!) as Record<string, { worst: number; greedy: number[] }> & {
        runtime: string;
      };
      expect(report.runtime).toBe(name);
      for (const fixture of FIXTURES) {
        const golden = JSON.parse(readFileSync(join(root, "test/fixtures/hf", fixture, "golden.json"), "utf8")) as { greedy: number[] };
        expect(report[fixture].worst, fixture).toBeLessThan(1e-4);
        expect(report[fixture].greedy, fixture).toEqual(golden.greedy);
      }
    },
    120_000,
  );
});
