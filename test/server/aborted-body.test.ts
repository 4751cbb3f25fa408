/**
 * A client that closes its connection before its request body has fully arrived is the client's
 * failure: the server counts a 400 (UnreadableBody), logs no error and stores nothing.
 */
import { connect } from "node:net";
import { afterEach, expect, it } from "vitest";
import type { LogWriter } from "../../src/platform/log.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { startInProcess, type InProcessServer } from "./in-process.ts";

let server: InProcessServer;
let store: InMemoryLightningStore;
afterEach(async () => {
  await server.close();
  await store.close();
});

/** Sends `bytes`, then drops the connection, and resolves once the socket is closed. */
const sendAndClose = (url: string, bytes: string): Promise<void> =>
  new Promise((resolve) => {
    const { hostname, port } = new URL(url);
    const socket = connect(Number(port), hostname, () => socket.write(bytes, () => setTimeout(() => socket.destroy(), 50)));
    socket.on("error", () => {});
    socket.on("close", () => resolve());
  });

it.each([
  ["Content-Length larger than what was sent", (body: string) => `Content-Length: ${body.length}\r\n\r\n${body.slice(0, 20)}`],
  [
    "a chunked body cut mid-chunk",
    (body: string) => `Transfer-Encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${body.slice(0, 20)}`,
  ],
])("%s: a 400 in the metrics, no error logged, nothing stored", async (_label, rest) => {
  store = new InMemoryLightningStore();
  const errors: string[] = [];
  const log: LogWriter = { debug() {}, info() {}, warning() {}, error: (m) => errors.push(m) };
  server = await startInProcess(store, { log });
  const body = `{"input":"${"x".repeat(500)}"}`;
  await sendAndClose(server.url, `POST /v1/agl/rollouts HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n${rest(body)}`);
  // The server finishes the request once it sees the connection closed.
  let metrics = "";
  for (let i = 0; i < 100 && !metrics.includes('path="/v1/agl/rollouts"'); i++) {
    await new Promise((r) => setTimeout(r, 20));
    metrics = await (await fetch(`${server.url}/metrics`)).text();
  }
  const counted = metrics.split("\n").filter((l) => l.startsWith("agl_http_total") && l.includes('path="/v1/agl/rollouts"'));
  expect(counted).toHaveLength(1);
  expect(counted[0], counted[0]).toContain(`status="400"`);
  expect(errors).toEqual([]);
  expect(errors).toEqual([]);
  expect((await store.statistics()).total_rollouts).toBe(0);
});
