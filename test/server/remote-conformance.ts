/**
 * The conformance suite through `LightningStoreClient` against a server in another process. The server
 * runs with the TEST-ONLY `--test-clock` flag: each test resets its store, and every request carries the
 * test's ManualClock time in `x-agl-test-clock`, so the suite runs unchanged.
 */
import { afterAll, beforeAll, describe, expect } from "vitest";
import { LightningStoreClient } from "../../src/client/index.ts";
import { TEST_CLOCK_HEADER } from "../../src/server/test-hooks.ts";
import { httpWire, runStoreConformance } from "../store/conformance.ts";
import { startServerProcess, type ServerProcess } from "./processes.ts";
import type { Runtime } from "../runtimes.ts";

/** `storeArgs`: where the test store lives and how it is served (default: one process, in memory). */
export function runRemoteConformance(runtime: Runtime, storeArgs: readonly string[] = ["--db", "memory"]): void {
  const label = storeArgs.join(" ");
  describe(`server process under ${runtime} (${label})`, () => {
    let server: ServerProcess;
    beforeAll(async () => {
      server = await startServerProcess(runtime, ["--test-clock", "--port", "0", ...storeArgs, "--log-level", "warning"]);
    }, 90_000);
    afterAll(async () => {
      // Graceful shutdown on SIGTERM: exit code 0.
      expect(await server.stop("SIGTERM")).toBe(0);
    });

    runStoreConformance(
      `LightningStoreClient -> ${runtime} server process (${label})`,
      async ({ clock }) => {
        const withClock: typeof fetch = (input, init) =>
          fetch(input, { ...init, headers: { ...(init?.headers as Record<string, string>), [TEST_CLOCK_HEADER]: String(clock.now()) } });
        const res = await withClock(`${server.url}/v1/agl/__test__/reset`, { method: "POST" });
        expect(res.status).toBe(200);
        await res.body?.cancel();
        return new LightningStoreClient(server.url, { retryDelays: [], healthRetryDelays: [], fetch: withClock });
      },
      { timingSlackMs: 500, wire: () => httpWire(server.url) },
    );
  });
}
