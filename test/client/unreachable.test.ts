/**
 * A store that is not there, as a user meets it: `checkHealth()` says so in one line naming the address
 * and why; a call's StoreConnectionError names the full URL and the reason behind "fetch failed"; and
 * `agl proxy --store URL` (a real process) warns once at startup, then answers routed calls with the URL.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LightningStoreClient, StoreConnectionError } from "../../src/client/index.ts";
import { serveFetch } from "../../src/platform/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { startServerProcess } from "../server/processes.ts";
import { startInProcess } from "../server/in-process.ts";

/** A loopback address nothing listens on: a port bound, then released. */
async function closedAddress(): Promise<string> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
  const { port } = s.address() as { port: number };
  await new Promise((resolve) => s.close(resolve));
  return `http://127.0.0.1:${port}`;
}

let nobody: string;
const dir = mkdtempSync(join(tmpdir(), "agl-unreachable-"));
beforeAll(async () => {
  nobody = await closedAddress();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("LightningStoreClient against an address without a store", () => {
  it("checkHealth() throws one line naming the address and the refusal", async () => {
    const client = new LightningStoreClient(nobody, { healthRetryDelays: [0.01] });
    const err = await client.checkHealth().then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(StoreConnectionError);
    const message = (err as Error).message;
    expect(message).toContain(`no LightningStore answers at ${nobody}`);
    expect(message).toMatch(/ECONNREFUSED|refused/i);
    expect(message).not.toContain("\n");
  });

  it("checkHealth() names the status of a server that is not a store", async () => {
    const other = await serveFetch(() => new Response("no", { status: 404 }), { hostname: "127.0.0.1", port: 0 });
    try {
      const err = await new LightningStoreClient(`http://127.0.0.1:${other.port}`, { healthRetryDelays: [] }).checkHealth().catch((e) => e);
      expect((err as Error).message).toContain(`at http://127.0.0.1:${other.port} (GET /v1/agl/health: HTTP 404)`);
    } finally {
      await other.stop();
    }
  });

  it("checkHealth() resolves against a running store", async () => {
    const server = await startInProcess(new InMemoryLightningStore());
    try {
      await expect(new LightningStoreClient(server.url).checkHealth()).resolves.toBeUndefined();
    } finally {
      await server.close();
    }
  });

  it("a call's StoreConnectionError names the full URL and the reason", async () => {
    const client = new LightningStoreClient(nobody, { retryDelays: [], healthRetryDelays: [] });
    await expect(client.statistics()).rejects.toThrow(`GET ${nobody}/v1/agl/statistics: fetch failed (ECONNREFUSED)`);
  });
});

describe("agl proxy --store URL without a store there", () => {
  it("warns once at startup, with the URL, and routed calls name it", async () => {
    const config = join(dir, "proxy.json");
    writeFileSync(config, JSON.stringify({ models: [{ name: "m", upstreams: [`${nobody}/v1`] }] }));
    const proc = await startServerProcess(
      "node",
      ["proxy", "--config", config, "--port", "0", "--store", nobody],
      {},
      / at (http:\/\/[^\s;]+)\/v1/,
    );
    try {
      const warnings = proc
        .output()
        .split("\n")
        .filter((l) => l.includes("WARNING"));
      expect(warnings).toEqual([
        expect.stringContaining(
          `[agl proxy] WARNING: no LightningStore answers at ${nobody} (GET /v1/agl/health: fetch failed (ECONNREFUSED))`,
        ),
      ]);
      const res = await fetch(`${proc.url}/rollout/ro-1/attempt/at-1/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] }),
      });
      expect(res.status).toBe(503);
      expect(((await res.json()) as { error: { message: string } }).error.message).toContain(`${nobody}/v1/agl/`);
    } finally {
      await proc.stop("SIGTERM");
    }
  }, 60_000);
});
