/** The runner's lean HTTP/1.1 fetch (src/trainer/node-fetch.ts) against a raw TCP server that answers as scripted. */
import { execFile } from "node:child_process";
import net from "node:net";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterEach, describe, expect, it } from "vitest";
import { nodeHttpFetch } from "../../src/trainer/node-fetch.ts";

interface Seen {
  conn: number;
  raw: string;
}

/** A server that hands each complete request (head + content-length body) to `answer` with its socket. */
async function rawServer(answer: (req: Seen, socket: net.Socket, index: number) => void) {
  const seen: Seen[] = [];
  let conns = 0;
  const server = net.createServer((socket) => {
    sockets.push(socket);
    const conn = ++conns;
    let buf = "";
    socket.on("data", (d) => {
      buf += d.toString("latin1");
      for (;;) {
        const end = buf.indexOf("\r\n\r\n");
        if (end < 0) return;
        const len = Number(/content-length: (\d+)/i.exec(buf.slice(0, end))?.[1] ?? 0);
        if (buf.length < end + 4 + len) return;
        const req = { conn, raw: buf.slice(0, end + 4 + len) };
        buf = buf.slice(end + 4 + len);
        seen.push(req);
        answer(req, socket, seen.length - 1);
      }
    });
    socket.on("error", () => {});
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  servers.push(server);
  return { url, seen, conns: () => conns };
}

const servers: net.Server[] = [];
const sockets: net.Socket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

const json = (body: string, extra = "") => `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;

describe("nodeHttpFetch", () => {
  it("sends one well-formed request and reads a content-length answer; the socket is reused", async () => {
    const s = await rawServer((_req, socket) => socket.write(json('{"ok":"é"}', "x-extra: 1\r\n")));
    const res = await nodeHttpFetch(`${s.url}/v1/agl/rollouts/search?x=1`, { method: "POST", headers: { "content-type": "application/json", authorization: "Bearer t" }, body: '{"a":"é"}' });
    expect(res.status).toBe(200);
    expect(res.ok).toBe(true);
    expect(res.headers.get("X-Extra")).toBe("1");
    expect(await res.json()).toEqual({ ok: "é" });
    const again = await nodeHttpFetch(`${s.url}/v1/agl/health`);
    expect(await again.text()).toBe('{"ok":"é"}');
    expect(s.conns()).toBe(1);
    const [post, get] = s.seen;
    expect(post!.raw.startsWith("POST /v1/agl/rollouts/search?x=1 HTTP/1.1\r\n")).toBe(true);
    expect(post!.raw).toMatch(/\r\nhost: 127\.0\.0\.1:\d+\r\n/);
    expect(post!.raw).toContain("\r\nauthorization: Bearer t\r\n");
    expect(post!.raw).toContain(`\r\ncontent-length: ${Buffer.byteLength('{"a":"é"}')}\r\n`);
    expect(Buffer.from(post!.raw, "latin1").toString("utf8").endsWith('\r\n\r\n{"a":"é"}')).toBe(true);
    expect(get!.raw.startsWith("GET /v1/agl/health HTTP/1.1\r\n")).toBe(true);
    expect(get!.raw).not.toContain("content-length");
  });

  it("reads chunked answers split across writes, and answers that end with the connection", async () => {
    const s = await rawServer((_req, socket, i) => {
      if (i === 0) {
        socket.write("HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel");
        setTimeout(() => socket.write("lo\r\n6;ext=1\r\n world\r\n0\r\n\r\n"), 20);
      } else {
        socket.write("HTTP/1.1 404 Not Found\r\n\r\nno length");
        socket.end();
      }
    });
    const a = await nodeHttpFetch(`${s.url}/a`, { method: "POST", body: "{}" });
    expect([a.status, a.ok, await a.text()]).toEqual([201, true, "hello world"]);
    const b = await nodeHttpFetch(`${s.url}/b`);
    expect([b.status, b.ok, await b.text()]).toEqual([404, false, "no length"]);
    // The closed socket is not reused.
    const c = await nodeHttpFetch(`${s.url}/c`);
    expect(c.status).toBe(404);
    expect(s.conns()).toBe(2);
  });

  it("sends again on a fresh socket when a reused one closes before any answer", async () => {
    const s = await rawServer((_req, socket, i) => {
      if (i === 1) socket.destroy(); // the keep-alive race: the server drops the idle socket
      else socket.write(json(`{"i":${i}}`));
    });
    expect(await (await nodeHttpFetch(`${s.url}/x`)).json()).toEqual({ i: 0 });
    expect(await (await nodeHttpFetch(`${s.url}/x`)).json()).toEqual({ i: 2 });
    expect(s.seen.map((r) => r.conn)).toEqual([1, 1, 2]);
  });

  it("fails (no resend) when a fresh socket closes mid-answer or cannot connect", async () => {
    const s = await rawServer((_req, socket) => {
      socket.write("HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc");
      socket.destroy();
    });
    await expect(nodeHttpFetch(`${s.url}/x`)).rejects.toThrow(/closed before the response was complete/);
    expect(s.seen).toHaveLength(1);
    const closed = net.createServer();
    await new Promise<void>((r) => closed.listen(0, "127.0.0.1", r));
    const port = (closed.address() as net.AddressInfo).port;
    await new Promise((r) => closed.close(r));
    await expect(nodeHttpFetch(`http://127.0.0.1:${port}/x`)).rejects.toThrow(/ECONNREFUSED/);
  });

  it("an abort rejects with the signal's reason and drops the socket", async () => {
    const s = await rawServer((_req, socket, i) => {
      if (i > 0) socket.write(json("{}"));
    });
    const ctl = new AbortController();
    const pending = nodeHttpFetch(`${s.url}/slow`, { signal: ctl.signal });
    setTimeout(() => ctl.abort(new Error("timed out")), 20);
    await expect(pending).rejects.toThrow("timed out");
    expect((await nodeHttpFetch(`${s.url}/next`)).status).toBe(200);
    expect(s.conns()).toBe(2);
    await expect(nodeHttpFetch(`${s.url}/x`, { signal: AbortSignal.abort(new Error("already")) })).rejects.toThrow("already");
  });

  it("refuses header values that would split the request", async () => {
    const s = await rawServer((_req, socket) => socket.write(json("{}")));
    await expect(nodeHttpFetch(`${s.url}/x`, { headers: { "x-a": "1\r\nx-b: 2" } })).rejects.toThrow(TypeError);
    expect(s.seen).toHaveLength(0);
  });
});

describe("nodeHttpFetch keep-alive", () => {
  it("an idle pooled socket does not keep the process alive", async () => {
    const s = await rawServer((_req, socket) => socket.write(json('{"ok":1}')));
    // The child fetches once, then arms an unref'd timer: it fires only if something else (a ref'd
    // idle socket, kept for 4 s) holds the event loop open.
    const script = `import { nodeHttpFetch } from ${JSON.stringify(fileURLToPath(new URL("../../src/trainer/node-fetch.ts", import.meta.url)))};
      const r = await nodeHttpFetch(${JSON.stringify(`${s.url}/x`)}); console.log(await r.text());
      setTimeout(() => { console.log("still alive"); process.exit(3); }, 1000).unref();`;
    const { stdout } = await promisify(execFile)(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { timeout: 60_000 });
    expect(stdout.trim()).toBe('{"ok":1}');
  });
});
