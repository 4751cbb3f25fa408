/** Slow client connections for the reliability tests: requests whose headers or body never complete. */
import { connect, type Socket } from "node:net";

export interface SlowSocket {
  socket: Socket;
  /** Everything the server sent back. */
  received: string;
  /** When the socket closed (performance.now()), or null while open. */
  closedAt: number | null;
  closed: Promise<void>;
}

/** A request whose body never ends (100,000 bytes announced). */
export const uploadHead =
  "POST /v1/agl/rollouts HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{";
/** A request whose headers never end. */
export const headersHead = "GET /v1/agl/health HTTP/1.1\r\nHost: localhost\r\nX-Slow: ";

/**
 * A connection that sends `head` at once and then one more byte a second, forever: a request whose
 * body (or headers) never completes. `localAddress` picks the client's address (any of 127.0.0.0/8
 * reaches loopback on Linux). Resolves once connected and `head` is written.
 */
export function trickle(url: string, head: string, localAddress?: string): Promise<SlowSocket> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect({ port: Number(port), host: hostname, localAddress });
    let timer: ReturnType<typeof setInterval> | undefined;
    let markClosed!: () => void;
    const slow: SlowSocket = { socket, received: "", closedAt: null, closed: new Promise((r) => (markClosed = r)) };
    socket.on("data", (d) => (slow.received += d.toString("latin1")));
    socket.on("error", () => {}); // a reset from the server is one of the outcomes under test
    socket.on("close", () => {
      clearInterval(timer);
      slow.closedAt = performance.now();
      markClosed();
    });
    socket.once("connect", () => {
      socket.write(head);
      timer = setInterval(() => socket.writable && socket.write("x"), 1000);
      resolve(slow);
    });
    socket.once("error", reject);
  });
}

/** Waits until every socket is closed or `seconds` have passed; returns those still open. */
export async function stillOpenAfter(list: SlowSocket[], seconds: number): Promise<SlowSocket[]> {
  await Promise.race([Promise.all(list.map((s) => s.closed)), new Promise((r) => setTimeout(r, seconds * 1000))]);
  return list.filter((s) => s.closedAt === null);
}
