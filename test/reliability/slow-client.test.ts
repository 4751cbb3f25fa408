/**
 * Slow and piled-up clients against a real `agl store` process on each runtime: uploads that trickle
 * one byte a second and headers that never end must not keep their sockets past the configured
 * timeouts, connections beyond the cap are refused without harming the server, real requests go on
 * meanwhile, a held long poll is not cut by the timeouts, and a client that hangs up mid-body is not
 * logged as an ERROR.
 */
import { connect, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { LightningStoreClient } from "../../src/client/index.ts";
import { startServerProcess, type ServerProcess } from "../server/processes.ts";
import { RUNTIMES, type Runtime } from "../runtimes.ts";
import { headersHead, type SlowSocket, stillOpenAfter, trickle, uploadHead } from "./slow-sockets.ts";

const SLOW_UPLOADS = 150;
const SLOW_HEADERS = 10;
const PROBES = 30;
/** Seconds; short so that the test sees the server act, generous bounds below so that load cannot break it. */
const REQUEST_TIMEOUT = 2;

/** How long the server may take past a timeout before the test calls it a failure (the machine may be loaded). */
const SLACK = 25;

async function realWork(client: LightningStoreClient, tag: string): Promise<void> {
  const r = await client.enqueueRollout({ tag });
  const claimed = await client.dequeueRollout();
  expect(claimed?.rollout_id).toBe(r.rollout_id);
  await client.updateAttempt(r.rollout_id, claimed!.attempt.attempt_id, { status: "succeeded" });
  expect((await client.getRolloutById(r.rollout_id))?.status).toBe("succeeded");
}

let server: ServerProcess | null = null;
const sockets: Socket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await server?.stop();
  server = null;
});

describe.each(RUNTIMES)("slow clients against agl store under %s", (runtime: Runtime) => {
  it("cuts slow uploads and headers at the timeouts, refuses connections beyond the cap, serves real requests meanwhile", async () => {
    // Node and Deno cap connections (slow headers included); Bun caps requests in flight (the uploads).
    const cap = runtime === "bun" ? SLOW_UPLOADS + 5 : SLOW_UPLOADS + SLOW_HEADERS + 5;
    server = await startServerProcess(runtime, [
      "--port",
      "0",
      "--db",
      "memory",
      "--log-level",
      "debug",
      "--request-timeout",
      String(REQUEST_TIMEOUT),
      "--headers-timeout",
      String(REQUEST_TIMEOUT),
      "--keep-alive-timeout",
      "1",
      "--max-connections",
      String(cap),
      // Every client here shares one address; the per-address limit has its own test (slowloris.test.ts).
      "--max-connections-per-address",
      "0",
    ]);
    const url = server.url;
    const client = new LightningStoreClient(url, { retryDelays: [] });

    const uploads: SlowSocket[] = [];
    for (let i = 0; i < SLOW_UPLOADS; i++) uploads.push(await trickle(url, uploadHead));
    const headers: SlowSocket[] = [];
    for (let i = 0; i < SLOW_HEADERS; i++) headers.push(await trickle(url, headersHead));
    const slow = [...uploads, ...headers];
    sockets.push(...slow.map((s) => s.socket));
    const opened = performance.now();

    // (a) real requests succeed while the slow sockets are open.
    await realWork(client, "meanwhile");

    // (c) more slow uploads than the cap allows: the extra ones are refused at once (Node, Deno:
    // the connection is closed unanswered; Bun: 503), the others held like the first ones.
    const probes: SlowSocket[] = [];
    for (let i = 0; i < PROBES; i++) probes.push(await trickle(url, uploadHead));
    sockets.push(...probes.map((s) => s.socket));
    await stillOpenAfter(probes, REQUEST_TIMEOUT + SLACK);
    const refused = probes.filter(
      (p) => p.closedAt !== null && (runtime === "bun" ? p.received.startsWith("HTTP/1.1 503") : p.received === ""),
    );
    // At most the 5 places left under the cap were given, and on Node and Deno one more for each
    // connection waiting for headers that a newcomer displaced (the slow headers, the client's idle one).
    const displaced = runtime === "bun" ? 0 : SLOW_HEADERS + 1;
    expect(refused.length).toBeGreaterThanOrEqual(PROBES - 5 - displaced);

    // (b) every slow socket is closed by the server, near the timeout.
    expect((await stillOpenAfter(slow, REQUEST_TIMEOUT + SLACK)).length).toBe(0);
    const longest = Math.max(...slow.map((s) => s.closedAt! - opened)) / 1000;
    expect(longest).toBeLessThan(REQUEST_TIMEOUT + SLACK);
    if (runtime !== "bun") {
      // node:http answers 408 before closing; Bun just closes.
      expect(uploads.every((s) => s.received.startsWith("HTTP/1.1 408"))).toBe(true);
    }

    // The server is fine afterwards, and the long poll outlives the request timeout.
    await realWork(client, "after");
    const waiting = await client.enqueueRollout({ tag: "never finished" });
    const t0 = performance.now();
    const held = await fetch(`${url}/v1/agl/waits/rollouts`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ rollout_ids: [waiting.rollout_id], timeout: REQUEST_TIMEOUT * 2 }),
    });
    expect(held.status).toBe(200);
    expect(await held.json()).toEqual([]);
    // Bun's idle timeout also runs while a request is handled, so the server answers a poll sooner there (the client asks again).
    if (runtime !== "bun") expect(performance.now() - t0).toBeGreaterThanOrEqual(REQUEST_TIMEOUT * 2 * 1000 - 100);
    const t1 = performance.now();
    expect(await client.waitForRollouts({ rollout_ids: [waiting.rollout_id], timeout: REQUEST_TIMEOUT * 2 })).toEqual([]);
    expect(performance.now() - t1).toBeGreaterThanOrEqual(REQUEST_TIMEOUT * 2 * 1000 - 100);

    // Cut uploads are client aborts to the app: logged at debug, never as an ERROR.
    expect(server.output()).not.toContain(" ERROR ");
    await client.close();
  }, 120_000);

  it("logs a client that hangs up mid-body at debug, not as an ERROR", async () => {
    server = await startServerProcess(runtime, ["--port", "0", "--db", "memory", "--log-level", "debug"]);
    const { hostname, port } = new URL(server.url);
    for (const body of ['Content-Length: 100\r\n\r\n{"input":', 'Transfer-Encoding: chunked\r\n\r\n5\r\n{"inp\r\n']) {
      const s = connect(Number(port), hostname);
      sockets.push(s);
      await new Promise<void>((r) => s.once("connect", () => r()));
      s.write(`POST /v1/agl/rollouts HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n${body}`);
      await new Promise((r) => setTimeout(r, 300));
      s.destroy();
    }
    const deadline = performance.now() + 20_000;
    while ((server.output().match(/the client closed the connection/g) ?? []).length < 2 && performance.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(server.output().match(/DEBUG POST \/v1\/agl\/rollouts: the client closed the connection/g)).toHaveLength(2);
    expect(server.output()).not.toContain(" ERROR ");
    expect((await fetch(`${server.url}/v1/agl/health`)).status).toBe(200);
  });
});
