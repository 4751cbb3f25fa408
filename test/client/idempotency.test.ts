/**
 * Retried writes are idempotent (docs/departures.md#23): the client sends one `Idempotency-Key` per call,
 * the same on each retry, and a write whose answer was lost after the store applied it (connection cut,
 * a 502 from a proxy, the client's own timeout) happens once, with the first answer returned.
 * Dequeues and finishes that claim are never re-sent.
 */
import { serve } from "@hono/node-server";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { LightningStoreClient, StoreConnectionError, StoreHttpError } from "../../src/client/index.ts";
import { createStoreApp } from "../../src/server/index.ts";
import type { LightningStore } from "../../src/store/base.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { spanFromAttributes, type AttemptedRollout, type Rollout } from "../../src/types/index.ts";

const RESOURCES = { llm: { resource_type: "llm", endpoint: "http://x", model: "m" } } as const;

describe("which calls carry an Idempotency-Key", () => {
  /** A fetch that always answers 503 (so every retry is used) and records each API request's key. */
  function recording() {
    const sent: { what: string; key: string | null }[] = [];
    const fetchFn: typeof fetch = async (input, init) => {
      const url = new URL(String(input));
      if (!url.pathname.endsWith("/health")) {
        sent.push({ what: `${init?.method} ${url.pathname}`, key: new Headers(init?.headers).get("idempotency-key") });
      }
      return new Response(JSON.stringify({ detail: "busy", error_type: "ServerError" }), {
        status: url.pathname.endsWith("/health") ? 200 : 503,
      });
    };
    return { sent, fetchFn };
  }
  const span = spanFromAttributes({ rollout_id: "ro-1", attempt_id: "at-1", sequence_id: 1, name: "s" });
  const calls: [string, (c: LightningStoreClient) => Promise<unknown>][] = [
    ["startRollout", (c) => c.startRollout(1)],
    ["enqueueRollout", (c) => c.enqueueRollout(1)],
    ["enqueueManyRollouts", (c) => c.enqueueManyRollouts([{ input: 1 }, { input: 2 }])],
    ["startAttempt", (c) => c.startAttempt("ro-1")],
    ["updateRollout", (c) => c.updateRollout("ro-1", { status: "failed" })],
    ["updateAttempt", (c) => c.updateAttempt("ro-1", "at-1", { status: "failed" })],
    ["addResources", (c) => c.addResources(RESOURCES)],
    ["updateResources", (c) => c.updateResources("rs-1", RESOURCES)],
    ["getNextSpanSequenceId", (c) => c.getNextSpanSequenceId("ro-1", "at-1")],
    ["getManySpanSequenceIds", (c) => c.getManySpanSequenceIds([["ro-1", "at-1"]])],
    ["addSpan", (c) => c.addSpan(span)],
    ["addManySpans", (c) => c.addManySpans([span])],
    ["addManySpansForSequenceIds", (c) => c.addManySpansForSequenceIds([span])],
    ["finishAttempt without a claim", (c) => c.finishAttempt({ rollout_id: "ro-1", attempt_id: "at-1", attempt: { status: "succeeded" } })],
    ["updateWorker", (c) => c.updateWorker("w-1", { n: 1 })],
  ];
  const client = (fetchFn: typeof fetch, retryDelays = [0.001, 0.001, 0.001]) =>
    new LightningStoreClient("http://store.invalid", { retryDelays, healthRetryDelays: [0.001], fetch: fetchFn });

  it.each(calls)("%s: one key, sent on every try, new for the next call", async (_name, call) => {
    const { sent, fetchFn } = recording();
    const c = client(fetchFn);
    await expect(call(c)).rejects.toBeInstanceOf(StoreHttpError);
    await expect(call(c)).rejects.toBeInstanceOf(StoreHttpError);
    expect(sent).toHaveLength(8);
    const [first, second] = [sent.slice(0, 4), sent.slice(4)];
    expect(first[0]!.key).toMatch(/^"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"$/);
    expect(new Set(first.map((s) => s.key))).toEqual(new Set([first[0]!.key]));
    expect(new Set(second.map((s) => s.key))).toEqual(new Set([second[0]!.key]));
    expect(second[0]!.key).not.toBe(first[0]!.key);
  });

  it("with no retries configured, writes send no key", async () => {
    const { sent, fetchFn } = recording();
    await expect(client(fetchFn, []).enqueueRollout(1)).rejects.toBeInstanceOf(StoreHttpError);
    expect(sent).toEqual([{ what: "POST /v1/agl/queues/rollouts/enqueue", key: null }]);
  });

  it("reads are retried without a key; dequeues and claiming finishes are sent once, without a key", async () => {
    const { sent, fetchFn } = recording();
    const c = client(fetchFn);
    const reads = [
      c.queryRollouts(),
      c.queryAttempts("ro-1"),
      c.querySpans("ro-1"),
      c.queryWorkers(),
      c.queryResources(),
      c.statistics(),
      c.getRolloutById("ro-1"),
    ];
    for (const r of reads) await expect(r).rejects.toBeInstanceOf(StoreHttpError);
    expect(sent).toHaveLength(reads.length * 4);
    expect(sent.every((s) => s.key === null)).toBe(true);
    sent.length = 0;
    await expect(c.dequeueRollout({ worker_id: "w" })).rejects.toBeInstanceOf(StoreHttpError);
    await expect(
      c.finishAttempt({ rollout_id: "ro-1", attempt_id: "at-1", attempt: { status: "succeeded" }, claim: { worker_id: "w" } }),
    ).rejects.toBeInstanceOf(StoreHttpError);
    expect(sent).toEqual([
      { what: "POST /v1/agl/queues/rollouts/dequeue", key: null },
      { what: "POST /v1/agl/attempts/finish", key: null },
    ]);
  });
});

type Fault = "cut" | "502";

interface FaultyServer {
  url: string;
  store: InMemoryLightningStore;
  /** `METHOD path` of every API request the server received. */
  seen: string[];
  /** The answers the store produced but the client never got. */
  dropped: string[];
  /** Drops the answer of the next request for which `match` is true, after the store applied it. */
  dropNext(match: (what: string) => boolean, fault: Fault): void;
  close(): Promise<void>;
}

/** A real store server whose hook can lose one answer the way a network or a proxy would. */
async function faultyServer(wrap: (s: LightningStore, seen: string[]) => LightningStore = (s) => s): Promise<FaultyServer> {
  const store = new InMemoryLightningStore({ scanDebounceSeconds: 0 });
  const seen: string[] = [];
  const dropped: string[] = [];
  const app = createStoreApp(wrap(store, seen));
  let pending: { match: (what: string) => boolean; fault: Fault } | null = null;
  const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
    const s = serve(
      {
        hostname: "127.0.0.1",
        port: 0,
        fetch: async (req: Request, env: { incoming: { socket: { destroy(): void } } }) => {
          const what = `${req.method} ${new URL(req.url).pathname}`;
          if (!what.endsWith("/health")) seen.push(what);
          const res = await app.fetch(req, env);
          if (pending === null || !pending.match(what)) return res;
          const { fault } = pending;
          pending = null;
          dropped.push(await res.text());
          if (fault === "502")
            return new Response("<html>502 Bad Gateway</html>", { status: 502, headers: { "content-type": "text/html" } });
          env.incoming.socket.destroy();
          return new Response(null, { status: 500 });
        },
      },
      () => resolve(s),
    );
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    store,
    seen,
    dropped,
    dropNext: (match, fault) => (pending = { match, fault }),
    close: async () => {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await store.close();
    },
  };
}

let server: FaultyServer | null = null;
afterEach(async () => {
  await server?.close();
  server = null;
});

const clientOf = (s: FaultyServer, o: { requestTimeout?: number } = {}) =>
  new LightningStoreClient(s.url, { retryDelays: [0.01, 0.01, 0.01], healthRetryDelays: [0.01], ...o });
const is = (route: string) => (what: string) => what === route;

describe.each(["cut", "502"] as const)("a write whose answer is lost (%s) after the store applied it", (fault) => {
  it("enqueueRollout: one rollout; the first answer returned", async () => {
    server = await faultyServer();
    server.dropNext(is("POST /v1/agl/queues/rollouts/enqueue"), fault);
    const r = await clientOf(server).enqueueRollout({ q: 1 });
    expect(server.seen).toEqual(["POST /v1/agl/queues/rollouts/enqueue", "POST /v1/agl/queues/rollouts/enqueue"]);
    expect(r).toEqual((JSON.parse(server.dropped[0]!) as Rollout[])[0]);
    expect((await server.store.queryRollouts()).items.map((x) => x.rollout_id)).toEqual([r.rollout_id]);
  });

  it("enqueueManyRollouts: each rollout once", async () => {
    server = await faultyServer();
    server.dropNext(is("POST /v1/agl/queues/rollouts/enqueue"), fault);
    const rs = await clientOf(server).enqueueManyRollouts([{ input: 1 }, { input: 2 }]);
    expect(rs).toEqual(JSON.parse(server.dropped[0]!));
    expect((await server.store.statistics()).total_rollouts).toBe(2);
  });

  it("startRollout: one rollout, one attempt", async () => {
    server = await faultyServer();
    server.dropNext(is("POST /v1/agl/rollouts"), fault);
    const r = await clientOf(server).startRollout({ q: 1 });
    expect(r).toEqual(JSON.parse(server.dropped[0]!));
    expect((await server.store.statistics()).total_rollouts).toBe(1);
    expect((await server.store.queryAttempts(r.rollout_id)).items).toHaveLength(1);
  });

  it("startAttempt: one attempt", async () => {
    server = await faultyServer();
    const queued = await server.store.enqueueRollout(1);
    server.dropNext(is(`POST /v1/agl/rollouts/${queued.rollout_id}/attempts`), fault);
    const a = await clientOf(server).startAttempt(queued.rollout_id, { worker_id: "w" });
    expect(a).toEqual(JSON.parse(server.dropped[0]!));
    expect((await server.store.queryAttempts(queued.rollout_id)).items.map((x) => x.attempt_id)).toEqual([a.attempt.attempt_id]);
  });

  it("addResources: one resources version", async () => {
    server = await faultyServer();
    server.dropNext(is("POST /v1/agl/resources"), fault);
    const rs = await clientOf(server).addResources(RESOURCES);
    expect(rs).toEqual(JSON.parse(server.dropped[0]!));
    expect((await server.store.queryResources()).items.map((x) => x.resources_id)).toEqual([rs.resources_id]);
  });

  it("addManySpans: the stored spans come back, not an empty list of refused duplicates", async () => {
    server = await faultyServer();
    const r = await server.store.startRollout(1);
    const spans = [1, 2].map((i) =>
      spanFromAttributes({ rollout_id: r.rollout_id, attempt_id: r.attempt.attempt_id, sequence_id: i, name: `s${i}` }),
    );
    server.dropNext(is("POST /v1/agl/spans/batch"), fault);
    const stored = await clientOf(server).addManySpans(spans);
    expect(stored.map((s) => s.sequence_id)).toEqual([1, 2]);
    expect((await server.store.querySpans(r.rollout_id)).items).toHaveLength(2);
  });

  it("a finish that claims is not re-sent: the caller gets the error, one rollout claimed", async () => {
    server = await faultyServer();
    const r = await server.store.startRollout(1);
    await server.store.enqueueRollout(2);
    server.dropNext(is("POST /v1/agl/attempts/finish"), fault);
    const err = await clientOf(server)
      .finishAttempt({
        rollout_id: r.rollout_id,
        attempt_id: r.attempt.attempt_id,
        attempt: { status: "succeeded" },
        claim: { worker_id: "w" },
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(fault === "cut" ? StoreConnectionError : StoreHttpError);
    expect(server.seen).toEqual(["POST /v1/agl/attempts/finish"]);
    expect((await server.store.queryRollouts({ status_in: ["queuing"] })).items).toHaveLength(0);
  });
});

it("a retry after the client's own timeout waits for the first request, still running, and gets its answer", async () => {
  // The first enqueue is held in the store until the retry has reached the server.
  let retryArrived!: () => void;
  const arrived = new Promise<void>((r) => (retryArrived = r));
  let storeCalls = 0;
  server = await faultyServer(
    (s, seen) =>
      new Proxy(s, {
        get(t, p) {
          const v = Reflect.get(t, p, t) as unknown;
          if (p !== "enqueueRollout") return typeof v === "function" ? v.bind(t) : v;
          return async (...args: unknown[]) => {
            if (storeCalls++ === 0) {
              const poll = setInterval(() => seen.filter((w) => w.endsWith("/enqueue")).length > 1 && retryArrived(), 5);
              await arrived;
              clearInterval(poll);
            }
            return (v as (...a: unknown[]) => Promise<unknown>).apply(t, args);
          };
        },
      }),
  );
  const r = await clientOf(server, { requestTimeout: 2 }).enqueueRollout({ q: 1 });
  expect(server.seen.filter((w) => w.endsWith("/enqueue"))).toHaveLength(2);
  expect(storeCalls).toBe(1);
  expect((await server.store.queryRollouts()).items.map((x: Rollout | AttemptedRollout) => x.rollout_id)).toEqual([r.rollout_id]);
});
