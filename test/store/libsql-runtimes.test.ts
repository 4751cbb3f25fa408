/**
 * The embedded (`file:`) libSQL store works under Node, Deno and Bun, through both drivers, and so does a
 * libSQL server URL (the Hrana test server of hrana-server.ts, run by this process: the children run
 * asynchronously so that it can answer them).
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { startHranaServer } from "./hrana-server.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const script = join(root, "test/store/libsql-cross-runtime.ts");
const bin = (name: string) => join(root, "node_modules/.bin", name);
const dir = mkdtempSync(join(tmpdir(), "libsql-runtimes-"));
const server = await startHranaServer((token) => (/^server-\w+$/.test(token) ? join(dir, `${token}.db`) : undefined));
afterAll(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});
const run = promisify(execFile);

const RUNTIMES: [string, string, string[]][] = [
  ["node", process.execPath, ["--import", "tsx", script, dir]],
  ["deno", bin("deno"), ["run", "-A", script, dir]],
  ["bun", bin("bun"), [script, dir]],
];

describe("LibsqlLightningStore on a file database under every runtime", () => {
  for (const [name, cmd, args] of RUNTIMES) {
    it(`${name}: a full lifecycle persists and reads back (native and @libsql/client drivers, and a server URL)`, async () => {
      const env = { ...process.env, NO_COLOR: "1", LIBSQL_SERVER_URL: server.url, LIBSQL_SERVER_TOKEN: `server-${name}` };
      const { stdout } = await run(cmd, args, { cwd: root, encoding: "utf8", timeout: 120_000, env });
      const report = JSON.parse(stdout.trim().split("\n").pop()!) as { runtime: string; results: unknown[] };
      expect(report.runtime).toBe(name);
      const expected = { status: "succeeded", spanNames: ["step-1", "step-2", "step-3"], workerStatus: "idle" };
      expect(report.results).toEqual([
        // WAL checkpoints run on a background thread with the native driver, on every runtime.
        { driver: "native", background: true, ...expected },
        { driver: "client", background: false, ...expected },
        { driver: "remote", background: false, ...expected },
      ]);
    }, 150_000);
  }
});
