/**
 * A store server that goes away and comes back, for outage tests: the in-memory store behind a real HTTP
 * server that can be stopped and restarted on the same port (connections refused meanwhile), and a
 * client `fetch` that can answer 503 for a while or lose the answer to a request the server handled.
 */
import { serve } from "@hono/node-server";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { LightningStoreClient } from "../../src/client/index.ts";
import { createStoreApp } from "../../src/server/index.ts";
import type { LightningStore } from "../../src/store/base.ts";

export interface RestartableServer {
  readonly url: string;
  /** Stops listening and cuts open connections: requests are refused until `start()`. */
  stop(): Promise<void>;
  /** Serves the same store on the same port again. */
  start(): Promise<void>;
}

async function listen(store: LightningStore, port: number): Promise<Server> {
  const app = createStoreApp(store);
  return new Promise<Server>((resolve) => {
    const s = serve({ fetch: app.fetch, hostname: "127.0.0.1", port }, () => resolve(s as Server));
  });
}

export async function restartableServer(store: LightningStore): Promise<RestartableServer & { close(): Promise<void> }> {
  let server: Server | null = await listen(store, 0);
  const { port } = server.address() as AddressInfo;
  const stop = async () => {
    const s = server;
    server = null;
    if (s === null) return;
    await new Promise<void>((resolve) => {
      s.close(() => resolve());
      s.closeAllConnections();
    });
  };
  return {
    url: `http://127.0.0.1:${port}`,
    stop,
    start: async () => {
      server ??= await listen(store, port);
    },
    close: stop,
  };
}

/** Routes that write spans: `/spans`, `/spans/batch`, `/spans/next`, `/attempts/finish`. */
export const SPAN_WRITE = /\/spans(\/batch|\/next)?$|\/attempts\/finish$/;

/** The client's fetch, with faults: requests matching `unavailable` are answered 503; `loseAnswerOf` drops one answer. */
export class FaultyFetch {
  /** Requests whose route ("POST /v1/agl/spans/batch") matches are answered 503 here; null: none. */
  unavailable: ((route: string) => boolean) | null = null;
  /** Requests (method and path) that failed: refused, answered 503 here, or answer lost. */
  readonly failures: string[] = [];
  /** Requests (method and path) that reached the server. */
  readonly served: string[] = [];
  private loseNext: ((route: string) => boolean) | null = null;

  /** The next request whose route matches is handled by the server, but its answer never arrives. */
  loseAnswerOf(match: (route: string) => boolean): void {
    this.loseNext = match;
  }

  readonly fetch: typeof fetch = async (input, init) => {
    const route = `${init?.method ?? "GET"} ${new URL(String(input)).pathname}`;
    if (this.unavailable?.(route)) {
      this.failures.push(route);
      return new Response(JSON.stringify({ detail: "the store is unavailable" }), { status: 503 });
    }
    let res: Response;
    try {
      res = await fetch(input, init);
    } catch (err) {
      this.failures.push(route);
      throw err;
    }
    this.served.push(route);
    if (this.loseNext?.(route)) {
      this.loseNext = null;
      await res.body?.cancel();
      this.failures.push(route);
      throw new TypeError("fetch failed: the connection was reset before the answer arrived");
    }
    return res;
  };

  /** How many span writes (spans, their sequence ids, an attempt's finishing request) failed so far. */
  spanWriteFailures(): number {
    return this.failures.filter((r) => SPAN_WRITE.test(r)).length;
  }
}

/** A client through `faults`, with short retry waits so an outage is seen quickly. */
export const flakyClient = (url: string, faults: FaultyFetch): LightningStoreClient =>
  new LightningStoreClient(url, { retryDelays: [0.05], healthRetryDelays: [0.05], fetch: faults.fetch });

/** Waits until `cond()` holds, checking often; fails after `limitMs` (generous: a loaded machine is slow). */
export async function until(cond: () => boolean | Promise<boolean>, what: string, limitMs = 20_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
