/** `forkClusterWorker` (src/platform/node-cluster.ts): a send to a worker that has just died does not end the primary. */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);

describe("a cluster primary", () => {
  it("outlives sends to a worker it has just killed (the write fails with EPIPE before the exit is seen)", async () => {
    // the script kills the worker, waits for it to die, then writes before the exit is seen: before the fix
    // the primary ended with exit code 1 every time (an unhandled 'error' event, EPIPE)
    for (let round = 0; round < 2; round++) {
      const { stdout } = await run("npx", ["tsx", "test/platform/cluster-gone-worker.ts"], { timeout: 60_000 });
      expect(stdout).toMatch(/sent \d+ after the kill; exit seen; other channel errors: 0/);
    }
  }, 120_000);
});
