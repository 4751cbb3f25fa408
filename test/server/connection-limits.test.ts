/**
 * The connection limits of the node:http server (src/platform/connection-guard.ts), in this process
 * with tiny limits: at the cap the connection waiting longest for a request's headers is closed
 * (an idle keep-alive one too), never one busy with a request; a newcomer is refused only when every
 * connection is busy; one address gets at most its own limit. Each case is reported in the log. A
 * graceful stop waits for requests in flight only, not for connections still waiting for headers.
 */
import { Agent, request } from "node:http";
import { connect, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { type ServedApp, type ServeLimits, serveFetch } from "../../src/platform/index.ts";
import { headersHead, type SlowSocket, trickle, uploadHead } from "../reliability/slow-sockets.ts";

/** Long enough that no timeout of the server acts during a test. */
const PATIENT = { headersTimeoutSeconds: 60, requestTimeoutSeconds: 60, keepAliveTimeoutSeconds: 60 };
/** How long to wait for something the server does at once (the machine may be loaded). */
const WAIT_MS = 20_000;

let served: ServedApp | null = null;
const opened: Array<SlowSocket | Socket> = [];
afterEach(async () => {
  for (const s of opened.splice(0)) ("socket" in s ? s.socket : s).destroy();
  await served?.stop();
  served = null;
});

/** Serves a handler that tells when an upload's headers are in and answers once its body is; GETs get 200 at once. */
async function serve(limits: Partial<ServeLimits>) {
  const warnings: string[] = [];
  let uploadsStarted = 0;
  const started: Array<() => void> = [];
  served = await serveFetch(
    async (req) => {
      if (req.method === "POST") {
        uploadsStarted++;
        for (const wake of started.splice(0)) wake();
        await req.text();
      }
      return new Response("ok");
    },
    { hostname: "127.0.0.1", port: 0, limits: { ...PATIENT, ...limits }, log: { warning: (m) => warnings.push(m) } },
  );
  const url = `http://127.0.0.1:${served.port}`;
  /** Opens a slow socket and keeps it for cleanup. */
  const slow = async (head: string, localAddress?: string) => {
    const s = await trickle(url, head, localAddress);
    opened.push(s);
    return s;
  };
  /** A slow upload whose headers the server has taken in: busy with a request. */
  const busyUpload = async () => {
    const before = uploadsStarted;
    const s = await slow(uploadHead);
    while (uploadsStarted === before) await new Promise<void>((wake) => started.push(wake));
    return s;
  };
  return { url, port: served.port, warnings, slow, busyUpload };
}

/** A GET on its own connection from `localAddress`: the status, or the error's code. */
function get(port: number, options: { localAddress?: string; agent?: Agent } = {}): Promise<{ status: number | string; socket?: Socket }> {
  return new Promise((resolve) => {
    const req = request(
      { host: "127.0.0.1", port, path: "/", agent: options.agent ?? false, localAddress: options.localAddress },
      (res) => {
        res.resume();
        res.on("end", () => resolve({ status: res.statusCode ?? 0, socket: req.socket ?? undefined }));
      },
    );
    req.on("error", (e: NodeJS.ErrnoException) => resolve({ status: e.code ?? e.message }));
    req.end();
  });
}

const closedWithin = (s: SlowSocket, ms = WAIT_MS) =>
  Promise.race([s.closed.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);

describe("connection limits of the node:http server", () => {
  it("at the cap closes the connection waiting longest for headers (idle keep-alive included), never a busy one", async () => {
    const { port, warnings, slow, busyUpload } = await serve({ maxConnections: 3, maxConnectionsPerAddress: 0 });
    const upload = await busyUpload();
    // An idle keep-alive connection: its answer is done, it waits for the next request's headers.
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const first = await get(port, { agent });
    expect(first.status).toBe(200);
    const keepAlive = first.socket!;
    opened.push(keepAlive);
    const keepAliveClosed = new Promise<void>((r) => keepAlive.once("close", () => r()));
    const slowHeaders = await slow(headersHead);
    // The cap (3) is reached: each newcomer closes the one waiting longest.
    const newcomer = await slow(headersHead);
    expect(await Promise.race([keepAliveClosed.then(() => true), new Promise((r) => setTimeout(() => r(false), WAIT_MS))])).toBe(true);
    expect(slowHeaders.closedAt).toBeNull();
    const second = await slow(headersHead);
    expect(await closedWithin(slowHeaders)).toBe(true);
    expect(slowHeaders.received).toBe("");
    expect(newcomer.closedAt).toBeNull();
    // A complete request gets in the same way, and is answered.
    expect((await get(port)).status).toBe(200);
    expect(await closedWithin(newcomer)).toBe(true);
    expect(second.closedAt).toBeNull();
    expect(upload.closedAt).toBeNull();
    expect(warnings).toEqual([
      expect.stringMatching(/^connection cap reached \(3\): closed 1 connection\(s\) still waiting for a request's headers/),
    ]);
    agent.destroy();
  });

  it("refuses a newcomer when every connection is busy with a request", async () => {
    const { port, warnings, busyUpload } = await serve({ maxConnections: 2, maxConnectionsPerAddress: 0 });
    const uploads = [await busyUpload(), await busyUpload()];
    const refused = await get(port);
    expect(refused.status).toMatch(/ECONNRESET|socket hang up/);
    expect(uploads.every((u) => u.closedAt === null)).toBe(true);
    expect(warnings).toEqual([expect.stringMatching(/^connection cap reached \(2\): refused 1 connection\(s\).*--max-connections$/)]);
  });

  it("gives one address at most its limit: its own connection waiting longest gives way, and the others keep their own", async () => {
    const { port, warnings, slow, busyUpload } = await serve({ maxConnections: 10, maxConnectionsPerAddress: 2 });
    const held = [await slow(headersHead, "127.0.0.1"), await slow(headersHead, "127.0.0.1")];
    const third = await slow(headersHead, "127.0.0.1");
    expect(await closedWithin(held[0]!)).toBe(true);
    expect(held[0]!.received).toBe("");
    expect(held[1]!.closedAt).toBeNull();
    expect(third.closedAt).toBeNull();
    expect((await get(port, { localAddress: "127.0.0.2" })).status).toBe(200);
    expect(warnings[0]).toMatch(/^connections from one address capped at 2: closed 1 connection\(s\).*--max-connections-per-address/);
    // An address whose connections are all busy with requests gets no more.
    for (const s of [held[1]!, third]) s.socket.destroy();
    await Promise.all([held[1]!.closed, third.closed]);
    const uploads = [await busyUpload(), await busyUpload()];
    let refused: number | string = 0;
    for (let i = 0; i < 100 && refused === 0; i++) {
      // The server may take a moment to see the closes above; until then a close makes room.
      const r = (await get(port, { localAddress: "127.0.0.1" })).status;
      if (r !== 200) refused = r;
      else await new Promise((w) => setTimeout(w, 50));
    }
    expect(refused).toMatch(/ECONNRESET|socket hang up/);
    expect(uploads.every((u) => u.closedAt === null)).toBe(true);
    expect((await get(port, { localAddress: "127.0.0.2" })).status).toBe(200);
  });
});

/** A connection that sends nothing, as the spare one a browser opens ahead of need and keeps for minutes. */
async function silentConnection(port: number): Promise<{ socket: Socket; closed: Promise<boolean> }> {
  const socket = connect({ port, host: "127.0.0.1" });
  socket.on("error", () => {});
  await new Promise((r) => socket.once("connect", r));
  opened.push(socket);
  return { socket, closed: new Promise((r) => socket.once("close", () => r(true))) };
}

describe("a graceful stop", () => {
  it("closes the connections waiting for a request's headers (silent, slow, idle keep-alive) at once, not one with a request in flight", async () => {
    const { port, slow, busyUpload } = await serve({});
    const upload = await busyUpload();
    const slowHeaders = await slow(headersHead);
    const silent = await silentConnection(port);
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const keepAlive = (await get(port, { agent })).socket!;
    const keepAliveClosed = new Promise<boolean>((r) => keepAlive.once("close", () => r(true)));
    const stopped = served!.stop(true);
    served = null;
    const timeout = new Promise<boolean>((r) => setTimeout(() => r(false), WAIT_MS));
    // node:http's own close() waits for all three (its header timeouts stop once it closes).
    expect(await Promise.race([silent.closed, timeout])).toBe(true);
    expect(await closedWithin(slowHeaders)).toBe(true);
    expect(await Promise.race([keepAliveClosed, timeout])).toBe(true);
    expect(upload.closedAt).toBeNull();
    // The stop ends once the request in flight does (here: its client goes away).
    upload.socket.destroy();
    await stopped;
    agent.destroy();
  });
});
