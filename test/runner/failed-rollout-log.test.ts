// A failed rollout is one log line at ERROR (its id, the error's class, message and root cause), as a
// user sees it on the console of a real process; its stack and fields only with AGL_LOG_LEVEL=debug.
import { createServer } from "node:net";
import { beforeAll, describe, expect, it } from "vitest";
import { runOnRuntime } from "../runtimes.ts";

let endpoint: string;
beforeAll(async () => {
  // A port nobody listens on: bound, then released.
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
  endpoint = `http://127.0.0.1:${(s.address() as { port: number }).port}/v1`;
  await new Promise((resolve) => s.close(resolve));
});

const run = (level?: string) =>
  runOnRuntime("node", "test/runner/fixtures/failing-rollouts.ts", {
    env: { FAILING_ENDPOINT: endpoint, AGL_LOG_LEVEL: level },
    timeout: 60_000,
  });

describe("a rollout whose model call fails", () => {
  it("logs one line each at the default level", async () => {
    const r = await run();
    expect(r.code).toBe(0);
    const lines = `${r.stdout}${r.stderr}`.trim().split("\n");
    expect(lines).toHaveLength(4);
    for (const line of lines)
      expect(line).toMatch(
        /^\[ERROR\] agentlightning\.runner: \[Worker 0 \| Rollout ro-\w+\] Exception during rollout: APIConnectionError: Connection error\. \(ECONNREFUSED\)$/,
      );
  }, 90_000);

  it("shows the stack and the error's fields at debug", async () => {
    const r = await run("debug");
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      /\[DEBUG\] agentlightning\.runner: \[Worker 0 \| Rollout ro-\w+\] Exception during rollout APIConnectionError: Connection error\.\n\s+at /,
    );
  }, 90_000);
});
