/** The embedded (`file:`) libSQL store works under Node, Deno and Bun, through both drivers. */
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const script = join(root, "test/store/libsql-cross-runtime.ts");
const bin = (name: string) => join(root, "node_modules/.bin", name);
const dir = mkdtempSync(join(tmpdir(), "libsql-runtimes-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const RUNTIMES: [string, string, string[]][] = [
  ["node", process.execPath, ["--import", "tsx", script, dir]],
  ["deno", bin("deno"), ["run", "-A", script, dir]],
  ["bun", bin("bun"), [script, dir]],
];

describe("LibsqlLightningStore on a file database under every runtime", () => {
  for (const [name, cmd, args] of RUNTIMES) {
    it(`${name}: a full lifecycle persists and reads back (native and @libsql/client drivers)`, () => {
      const stdout = execFileSync(cmd, args, { cwd: root, encoding: "utf8", timeout: 120_000, env: { ...process.env, NO_COLOR: "1" } });
      const report = JSON.parse(stdout.trim().split("\n").pop()!) as { runtime: string; results: unknown[] };
      expect(report.runtime).toBe(name);
      const expected = { status: "succeeded", spanNames: ["step-1", "step-2", "step-3"], workerStatus: "idle" };
      expect(report.results).toEqual([
        // WAL checkpoints run on a background thread with the native driver, on every runtime.
        { driver: "native", background: true, ...expected },
        { driver: "client", background: false, ...expected },
      ]);
    }, 150_000);
  }
});
