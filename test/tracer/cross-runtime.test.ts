/** Context propagation (AsyncLocalStorage) and span routing behave the same on Node, Deno and Bun. */
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const script = join(root, "test/tracer/cross-runtime.ts");
const bin = (name: string) => join(root, "node_modules/.bin", name);

const RUNTIMES: [string, string, string[]][] = [
  ["node", process.execPath, ["--import", "tsx", script]],
  ["deno", bin("deno"), ["run", "-A", script]],
  ["bun", bin("bun"), [script]],
];

describe("tracing across runtimes", () => {
  for (const [name, cmd, args] of RUNTIMES) {
    it(`${name}: concurrent runners' spans land in their own rollouts, in start order`, () => {
      const stdout = execFileSync(cmd, args, { cwd: root, encoding: "utf8", timeout: 60_000, env: { ...process.env, NO_COLOR: "1" } });
      const report = JSON.parse(stdout.trim().split("\n").pop()!) as {
        runtime: string;
        rollouts: { names: string[]; consecutive: boolean; reward: unknown; status: string }[];
      };
      expect(report.runtime).toBe(name);
      expect(report.rollouts).toHaveLength(6);
      report.rollouts.forEach((r, i) => {
        const id = i + 1;
        expect(r.status).toBe("succeeded");
        expect(r.names).toEqual([
          `t${id}.2`,
          `t${id}.1`,
          `t${id}.0`,
          `t${id}.0`,
          `t${id}.1`,
          `t${id}.0`,
          `t${id}.0`,
          "agentlightning.annotation",
        ]);
        expect(r.consecutive).toBe(true);
        expect(r.reward).toBeCloseTo(id / 10);
      });
    }, 90_000);
  }
});
