/**
 * The embedded (`file:`) libSQL store works under Node, Deno and Bun, through both drivers, and so does a
 * libSQL server URL (the Hrana test server of hrana-server.ts, run by this process: the children run
 * asynchronously so that it can answer them).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { RUNTIMES, runReport } from "../runtimes.ts";
import { startHranaServer } from "./hrana-server.ts";

const dir = mkdtempSync(join(tmpdir(), "libsql-runtimes-"));
const server = await startHranaServer((token) => (/^server-\w+$/.test(token) ? join(dir, `${token}.db`) : undefined));
afterAll(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("LibsqlLightningStore on a file database under every runtime", () => {
  for (const runtime of RUNTIMES) {
    it(`${runtime}: a full lifecycle persists and reads back (native and @libsql/client drivers, and a server URL)`, async () => {
      const report = await runReport<{ runtime: string; results: unknown[] }>(runtime, "test/store/libsql-cross-runtime.ts", {
        args: [dir],
        env: { LIBSQL_SERVER_URL: server.url, LIBSQL_SERVER_TOKEN: `server-${runtime}` },
        timeout: 120_000,
      });
      expect(report.runtime).toBe(runtime);
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
