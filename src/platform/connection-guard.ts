/**
 * The connection limits of a node:http server (Node, and Deno through its node:http), kept here rather
 * than by `server.maxConnections`, which can only refuse the newcomer: a full server would then be
 * held by clients that never finish their headers (slowloris) while complete requests are turned
 * away. Here a client address gets at most `maxConnectionsPerAddress` connections (beyond it, that
 * address's own connection waiting longest for headers is closed, or the newcomer refused when all of
 * its connections are busy), and at the cap the
 * connection that has waited longest for a request's headers (a slow client, or an idle keep-alive
 * one: both wait for headers) is closed to make room. Only when every connection is busy with a
 * request (being received or answered) is the newcomer refused.
 */
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { limitReporters } from "./refusals.ts";
import type { ServeLimits } from "./types.ts";

type Limits = Pick<ServeLimits, "maxConnections" | "maxConnectionsPerAddress">;

/** What a guarded server can do with the connections the guard sees. */
export interface ConnectionGuard {
  /**
   * Closes every connection waiting for a request's headers: an idle keep-alive one, and one that is
   * silent or still sending headers, which node:http stops timing out once the server closes. A graceful
   * stop calls this so that it waits only for the requests in flight.
   */
  closeWaiting(): void;
}

export function guardConnections(server: Server, limits: Limits, report: ReturnType<typeof limitReporters>): ConnectionGuard {
  const open = new Set<Socket>();
  /** Connections waiting for a request's headers, longest waiting first (a Set keeps insertion order). */
  const waiting = new Set<Socket>();
  /** Requests of a connection being received or answered (several when pipelined). */
  const requests = new Map<Socket, number>();
  const perAddress = new Map<string, number>();

  const addressOf = (socket: Socket): string => socket.remoteAddress ?? "";
  const forget = (socket: Socket): void => {
    if (!open.delete(socket)) return;
    waiting.delete(socket);
    requests.delete(socket);
    const address = addressOf(socket);
    const n = (perAddress.get(address) ?? 1) - 1;
    if (n > 0) perAddress.set(address, n);
    else perAddress.delete(address);
  };

  const oldestWaitingFrom = (address: string): Socket | undefined => {
    for (const socket of waiting) if (addressOf(socket) === address) return socket;
    return undefined;
  };

  // node:http's own listener has set the socket up by now: closing it here is what any client hang-up does.
  server.on("connection", (socket: Socket) => {
    const address = addressOf(socket);
    const fromAddress = perAddress.get(address) ?? 0;
    const overAddress = limits.maxConnectionsPerAddress > 0 && fromAddress >= limits.maxConnectionsPerAddress;
    if (overAddress || open.size >= limits.maxConnections) {
      // Over its address's limit, that address's own connection waiting longest gives way, so a host
      // whose pool holds idle keep-alive connections is never refused for them (slow headers from it
      // still hold no more); at the cap, whichever connection has waited longest.
      const givesWay = overAddress ? oldestWaitingFrom(address) : waiting.values().next().value;
      if (givesWay === undefined) {
        socket.destroy();
        (overAddress ? report.refusedForAddress : report.refusedAtCap)();
        return;
      }
      forget(givesWay);
      givesWay.destroy();
      (overAddress ? report.evictedForAddress : report.evicted)();
    }
    open.add(socket);
    waiting.add(socket);
    perAddress.set(address, (perAddress.get(address) ?? 0) + 1); // after any eviction above
    socket.once("close", () => forget(socket));
  });

  // Before the app's listener, so that the connection counts as busy before any answer can finish.
  server.prependListener("request", (req: IncomingMessage, res: ServerResponse) => {
    const socket = req.socket;
    if (!open.has(socket)) return;
    waiting.delete(socket);
    requests.set(socket, (requests.get(socket) ?? 0) + 1);
    res.once("finish", () => {
      if (!open.has(socket)) return;
      const left = (requests.get(socket) ?? 1) - 1;
      if (left > 0) requests.set(socket, left);
      else {
        requests.delete(socket);
        // Waiting for the next request's headers again: at the back of the line.
        waiting.add(socket);
      }
    });
  });

  return {
    closeWaiting() {
      for (const socket of waiting) socket.destroy();
    },
  };
}
