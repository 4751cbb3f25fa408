// A busy port, as a user meets it: every server command and the `cs` example, under Node, Deno and Bun
// as real processes, ends with exit 1 and one line that names the port and how to choose another; no
// stack, no terminal colour codes. `agl serve` says so before it loads the model (here a model folder
// that does not exist, which it would otherwise report first).
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RUNTIMES, type RunResult, runOnRuntime } from "../runtimes.ts";

const dir = mkdtempSync(join(tmpdir(), "agl-ports-"));
let blocker: Server;
let port: number;

beforeAll(async () => {
  blocker = createServer();
  await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve));
  port = (blocker.address() as { port: number }).port;
});
afterAll(async () => {
  await new Promise((resolve) => blocker.close(resolve));
  rmSync(dir, { recursive: true, force: true });
});

/** The one line a busy port must produce, and nothing else. */
function expectOneLine(r: RunResult, prefix: string, setting: string): void {
  const lines = `${r.stdout}${r.stderr}`.trim().split("\n");
  expect(lines, `${r.stdout}${r.stderr}`).toEqual([
    `${prefix}: port ${port} on 127.0.0.1 is already in use: stop what holds it, or choose another with ${setting} (0 picks a free one)`,
  ]);
  expect(r.code).toBe(1);
}

describe.each(RUNTIMES)("a busy port under %s", (runtime) => {
  const agl = (...args: string[]) => runOnRuntime(runtime, `runtimes/${runtime}.ts`, { args, timeout: 60_000 });

  it("agl store names --port and AGL_SERVER_PORT", async () => {
    expectOneLine(await agl("store", "--db", "memory", "--port", String(port)), "agl store", "--port or AGL_SERVER_PORT");
  }, 90_000);

  it("agl serve says so before loading the model", async () => {
    expectOneLine(await agl("serve", "--model", join(dir, "no-model"), "--port", String(port)), "agl serve", "--port");
  }, 90_000);

  it("agl proxy names --port and the config's port", async () => {
    const config = join(dir, "proxy.json");
    writeFileSync(config, JSON.stringify({ models: [{ name: "m", upstreams: ["http://127.0.0.1:9/v1"] }] }));
    expectOneLine(await agl("proxy", "--config", config, "--port", String(port)), "agl proxy", "--port (or the config's port)");
  }, 90_000);

  it("the cs example names AGL_SERVER_PORT and server_port", async () => {
    const r = await runOnRuntime(runtime, "examples/arithmetic/train.ts", {
      args: ["cs"],
      env: { AGL_SERVER_PORT: String(port) },
      timeout: 60_000,
    });
    expectOneLine(r, "examples/arithmetic", "AGL_SERVER_PORT or the strategy's server_port");
  }, 90_000);
});
