// SIGTERM to `npx …` stops the server it started, on Node, Deno and Bun. npm runs a command through a
// shell and passes SIGTERM to that shell only, which dies without passing it on; the server must not
// live on with its port (src/server/run.ts: platformHost).
import { type ChildProcess, spawn } from "node:child_process";
import { afterAll, describe, expect, it } from "vitest";
import { ROOT, type Runtime, RUNTIMES } from "../runtimes.ts";

const NPX: Record<Runtime, string[]> = {
  node: ["agl"],
  deno: ["deno", "run", "-A", "runtimes/deno.ts"],
  bun: ["bun", "runtimes/bun.ts"],
};

const started: ChildProcess[] = [];
afterAll(() => {
  // Whatever a failed test left: npx led its own process group, which its orphans keep.
  for (const p of started)
    try {
      process.kill(-p.pid!, "SIGKILL");
    } catch {
      // already gone
    }
});

describe.each(RUNTIMES)("npx under %s", (runtime) => {
  it("SIGTERM to npx stops the store server it started", async () => {
    const npx = spawn("npx", [...NPX[runtime], "store", "--db", "memory", "--port", "0"], {
      cwd: ROOT,
      env: { ...process.env, NO_COLOR: "1" },
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    started.push(npx);
    let out = "";
    // The pipes close when every process holding them (npm, its shell, the server) has ended.
    const closed = new Promise<void>((resolve) => npx.stdout!.once("close", resolve));
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no server within 60 s:\n${out}`)), 60_000);
      const onData = (d: Buffer) => {
        out += d.toString();
        const m = /listening on (http:\/\/\S+)[\s\S]*Data: .*\n/.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      };
      npx.stdout!.on("data", onData);
      npx.stderr!.on("data", onData);
    });
    expect((await fetch(`${url}/v1/agl/health`)).status).toBe(200);

    npx.kill("SIGTERM");
    const within = await Promise.race([closed.then(() => true), new Promise((r) => setTimeout(() => r(false), 15_000))]);
    expect(within, `the server outlived npx:\n${out}`).toBe(true);
    expect(out).toContain("SIGTERM received");
    await expect(fetch(`${url}/v1/agl/health`)).rejects.toThrow();
  }, 90_000);
});
