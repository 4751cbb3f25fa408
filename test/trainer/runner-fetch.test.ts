/**
 * The runner's HTTP client (src/trainer/runner-fetch.ts) against a raw TCP server that answers as
 * scripted, malformed answers included: each must end in an error (or the bytes really sent), never
 * in a hang, a wrong answer, or a request sent twice.
 */
import { execFile } from "node:child_process";
import net from "node:net";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterEach, describe, expect, it } from "vitest";
import { LightningStoreClient } from "../../src/client/client.ts";
import { StoreConnectionError } from "../../src/client/errors.ts";
import { undiciFetch } from "../../src/trainer/runner-fetch.ts";

const modulePath = fileURLToPath(new URL("../../src/trainer/runner-fetch.ts", import.meta.url));
const runNode = promisify(execFile);

interface Seen {
  conn: number;
  head: string;
  body: string;
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
        const len = Number(/content-length: *(\d+)/i.exec(buf.slice(0, end))?.[1] ?? 0);
        if (buf.length < end + 4 + len) return;
        const req = { conn, head: buf.slice(0, end), body: buf.slice(end + 4, end + 4 + len) };
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

const json = (body: string, extra = "") =>
  `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nkeep-alive: timeout=30\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;

/** Runs `code` (an ES module that may import `undiciFetch`) in a fresh Node process; a hang there cannot stall this one. */
async function inChild(code: string): Promise<string> {
  const script = `import { undiciFetch } from ${JSON.stringify(modulePath)};\n${code}`;
  const { stdout } = await runNode(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { timeout: 60_000 });
  return stdout.trim();
}

describe("runner fetch (undici)", () => {
  it("sends well-formed requests and reads the answers; sockets are reused", async () => {
    const s = await rawServer((_req, socket) => socket.write(json('{"ok":"é"}', "x-extra: 1\r\n")));
    const res = await undiciFetch(`${s.url}/v1/agl/rollouts/search?x=1`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: "Bearer t" },
      body: '{"a":"é"}',
    });
    expect([res.status, res.ok, res.headers.get("X-Extra")]).toEqual([200, true, "1"]);
    expect(await res.json()).toEqual({ ok: "é" });
    const again = await undiciFetch(`${s.url}/v1/agl/health`);
    expect(await again.text()).toBe('{"ok":"é"}');
    for (let i = 0; i < 4; i++) await (await undiciFetch(`${s.url}/v1/agl/health`)).text();
    expect(s.conns()).toBeLessThan(s.seen.length);
    const [post, get] = s.seen;
    expect(post!.head.startsWith("POST /v1/agl/rollouts/search?x=1 HTTP/1.1\r\n")).toBe(true);
    expect(post!.head).toMatch(/\r\nhost: 127\.0\.0\.1:\d+/i);
    expect(post!.head).toMatch(/\r\nauthorization: Bearer t/i);
    expect(Buffer.from(post!.body, "latin1").toString("utf8")).toBe('{"a":"é"}');
    expect(get!.head.startsWith("GET /v1/agl/health HTTP/1.1\r\n")).toBe(true);
  });

  it("reads chunked answers split across writes, and non-2xx answers", async () => {
    const s = await rawServer((_req, socket, i) => {
      if (i === 0) {
        socket.write("HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel");
        setTimeout(() => socket.write("lo\r\n6;ext=1\r\n world\r\n0\r\n\r\n"), 20);
      } else socket.write("HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\nno");
    });
    const a = await undiciFetch(`${s.url}/a`, { method: "POST", body: "{}" });
    expect([a.status, a.ok, await a.text()]).toEqual([201, true, "hello world"]);
    const b = await undiciFetch(`${s.url}/b`);
    expect([b.status, b.ok, await b.text()]).toEqual([404, false, "no"]);
  });

  // Each answer below is broken; an HTTP/1.1 client must refuse it rather than return a wrong answer.
  const malformed: [string, string][] = [
    ["a four-digit status", "HTTP/1.1 2000 OK\r\ncontent-length: 2\r\n\r\nok"],
    ["conflicting content-lengths", "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 5\r\n\r\nok"],
    ["a chunk not followed by CRLF", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nokXX0\r\n\r\n"],
    ["a head that never ends (1 MB)", `HTTP/1.1 200 OK\r\nx-big: ${"a".repeat(1 << 20)}`],
  ];
  for (const [name, raw] of malformed) {
    it(`refuses ${name}`, async () => {
      const s = await rawServer((_req, socket) => socket.write(raw));
      await expect(undiciFetch(`${s.url}/x`)).rejects.toThrow();
    }, 30_000);
  }

  it("a transfer-encoding that merely contains 'chunked' is not chunked framing: the body is the bytes up to close", async () => {
    const raw = "2\r\nok\r\n0\r\n\r\n";
    const s = await rawServer((_req, socket) => socket.end(`HTTP/1.1 200 OK\r\ntransfer-encoding: xchunkedx\r\n\r\n${raw}`));
    const res = await undiciFetch(`${s.url}/x`);
    expect(await res.text()).toBe(raw);
  });

  it("bytes after a complete answer are dropped with the socket: the next request gets its own answer", async () => {
    const s = await rawServer((_req, socket, i) => {
      if (i === 0) socket.write(`${json('"ok"')}${json('"stray"')}`);
      else socket.write(json('"real"'));
    });
    expect(await (await undiciFetch(`${s.url}/a`)).json()).toBe("ok");
    expect(await (await undiciFetch(`${s.url}/b`)).json()).toBe("real");
  });

  it("a negative chunk size is an error at once, and an AbortSignal still ends a request the server never finishes", async () => {
    // In a child process: a client that spins on such an answer would stall this test process for good.
    const s = await rawServer((req, socket) => {
      if (req.head.startsWith("GET /negative"))
        socket.write("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n-6\r\nhello\r\n0\r\n\r\n");
      else socket.write("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n"); // and nothing more
    });
    const out = await inChild(`
      const outcome = (p) => p.then(async (r) => "answered " + r.status + " " + (await r.text()), (e) => "error: " + (e?.message ?? e));
      console.log(await outcome(undiciFetch(${JSON.stringify(`${s.url}/negative`)})));
      const ctl = new AbortController();
      setTimeout(() => ctl.abort(new Error("stopped by the caller")), 300);
      console.log(await outcome(undiciFetch(${JSON.stringify(`${s.url}/endless`)}, { signal: ctl.signal })));
      process.exit(0);`);
    const [negative, endless] = out.split("\n");
    expect(negative).toMatch(/^error: .*chunk size/i);
    expect(endless).toBe("error: stopped by the caller");
  }, 90_000);

  it("an abort before the answer rejects with the signal's reason; the next request still works", async () => {
    const s = await rawServer((_req, socket, i) => {
      if (i > 0) socket.write(json("{}"));
    });
    const ctl = new AbortController();
    const pending = undiciFetch(`${s.url}/slow`, { signal: ctl.signal });
    setTimeout(() => ctl.abort(new Error("timed out")), 50);
    await expect(pending).rejects.toThrow("timed out");
    expect((await undiciFetch(`${s.url}/next`)).status).toBe(200);
    await expect(undiciFetch(`${s.url}/x`, { signal: AbortSignal.abort(new Error("already")) })).rejects.toThrow("already");
  });

  it("refuses header values that would split the request", async () => {
    const s = await rawServer((_req, socket) => socket.write(json("{}")));
    await expect(undiciFetch(`${s.url}/x`, { headers: { "x-a": "1\r\nx-b: 2" } })).rejects.toThrow();
    expect(s.seen).toHaveLength(0);
  });

  it("a dequeue is sent once when the server closes the reused keep-alive socket without answering", async () => {
    const s = await rawServer((req, socket) => {
      // Health checks are answered on a keep-alive socket; the dequeue that reuses it finds it closed.
      if (req.head.startsWith("GET")) socket.write(json("{}"));
      else socket.destroy();
    });
    const client = new LightningStoreClient(s.url, { fetch: undiciFetch as typeof fetch, retryDelays: [], healthRetryDelays: [] });
    // Sequential requests: the pool keeps (at most a few) sockets and every one has served a request.
    for (let i = 0; i < 4; i++) expect(await client.health()).toBe(true);
    const used = new Set(s.seen.map((r) => r.conn));
    expect(used.size).toBeLessThan(4);
    await expect(client.dequeueRollout({ worker_id: "Worker-0" })).rejects.toThrow(StoreConnectionError);
    // Give a client that re-sends time to do it.
    await new Promise((r) => setTimeout(r, 300));
    const dequeues = s.seen.filter((r) => r.head.startsWith("POST /v1/agl/queues/rollouts/dequeue"));
    expect(dequeues).toHaveLength(1);
    expect(used.has(dequeues[0]!.conn)).toBe(true);
    expect(s.conns()).toBe(used.size);
  });
});

describe("runner fetch keep-alive", () => {
  it("an idle pooled socket does not keep the process alive", async () => {
    const s = await rawServer((_req, socket) => socket.write(json('{"ok":1}')));
    // The child fetches once, then arms an unref'd timer: it fires only if something else (a ref'd
    // idle socket) holds the event loop open.
    const out = await inChild(`
      const r = await undiciFetch(${JSON.stringify(`${s.url}/x`)}); console.log(await r.text());
      setTimeout(() => { console.log("still alive"); process.exit(3); }, 1000).unref();`);
    expect(out).toBe('{"ok":1}');
  }, 90_000);
});
