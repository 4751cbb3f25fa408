import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const bin = (name: string) => join(root, "node_modules/.bin", name);

const runtimes = (script: string): [string, string, string[]][] => [
  ["node", process.execPath, ["--import", "tsx", script]],
  ["deno", bin("deno"), ["run", "-A", script]],
  ["bun", bin("bun"), [script]],
];

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

describe.each(SCRIPTS)("%s gives identical results under Node, Deno and Bun", (_, path) => {
  const reports: Report[] = [];
  for (const [name, cmd, args] of runtimes(join(root, path))) {
    it(`${name}: loads the embedded module and matches the reference`, () => {
      const stdout = execFileSync(cmd, args, { cwd: root, encoding: "utf8", timeout: 60_000, env: { ...process.env, NO_COLOR: "1" } });
      const report = JSON.parse(stdout.trim().split("\n").pop()!) as Report;
      expect(report.runtime).toBe(name);
      expect(report.mismatches).toEqual([]);
      reports.push(report);
    }, 90_000);
  }
  it("all three digests are equal", () => {
    expect(reports).toHaveLength(3);
    expect(new Set(reports.map((r) => r.digest)).size).toBe(1);
  });
});
