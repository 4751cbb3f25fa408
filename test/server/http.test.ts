/**
 * The HTTP layer itself: the error model for bad input (docs/departures.md#1), the bearer token, CORS, the
 * body limit, metrics, the batch span route and the long poll. Every bad request must leave the data
 * as it was and the server up.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { LightningStoreClient, StoreHttpError } from "../../src/client/index.ts";
import type { StoreAppOptions } from "../../src/server/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { spanFromAttributes, type AttemptedRollout, type Span } from "../../src/types/index.ts";
import { startInProcess, type InProcessServer } from "./in-process.ts";

let store: InMemoryLightningStore;
let server: InProcessServer;

async function start(options: StoreAppOptions = {}): Promise<void> {
  store = new InMemoryLightningStore({ scanDebounceSeconds: 0 });
  server = await startInProcess(store, options);
}
afterEach(async () => {
  await server.close();
  await store.close();
});

const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${server.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });

const span = (r: AttemptedRollout, o: { sequence_id?: number; name?: string; attempt_id?: string } = {}) =>
  spanFromAttributes({
    rollout_id: r.rollout_id,
    attempt_id: o.attempt_id ?? r.attempt.attempt_id,
    sequence_id: o.sequence_id ?? 1,
    name: o.name ?? "s",
  });

/** Everything stored, to compare before and after a rejected request. */
const dump = async () => ({
  stats: await store.statistics().then(({ uptime: _u, ...rest }) => rest),
  rollouts: (await store.queryRollouts()).items,
});

describe("bad input gets a 4xx with a clear message; data unchanged; server up", () => {
  beforeEach(() => start({ bodyLimitBytes: 4096 }));

  const cases: {
    label: string;
    send: () => Promise<Response>;
    status: number;
    type: string;
    detail?: RegExp;
    path?: (string | number)[];
  }[] = [
    {
      label: "malformed JSON",
      send: () => post("/v1/agl/rollouts", '{"input": 1,'),
      status: 400,
      type: "ValidationError",
      detail: /Malformed JSON/,
    },
    { label: "a missing body", send: () => post("/v1/agl/rollouts", ""), status: 400, type: "ValidationError", detail: /body is required/ },
    {
      label: "a wrong type",
      send: () => post("/v1/agl/rollouts", { input: 1, mode: 5 }),
      status: 400,
      type: "ValidationError",
      path: ["mode"],
    },
    {
      label: "a wrong nested type",
      send: () => post("/v1/agl/queues/rollouts/enqueue", { rollouts: [{ input: 1 }, { input: 2, config: { max_attempts: "3" } }] }),
      status: 400,
      type: "ValidationError",
      path: ["rollouts", 1, "config", "max_attempts"],
    },
    {
      label: "an unknown field",
      send: () => post("/v1/agl/rollouts", { input: 1, priority: "high" }),
      status: 400,
      type: "ValidationError",
      detail: /priority/,
    },
    {
      label: "an unknown config field",
      send: () => post("/v1/agl/rollouts", { input: 1, config: { max_attempt: 3 } }),
      status: 400,
      type: "ValidationError",
      detail: /max_attempt/,
    },
    {
      label: "an unknown query parameter",
      send: () => fetch(`${server.url}/v1/agl/rollouts?stauts_in=queuing`),
      status: 400,
      type: "ValidationError",
      detail: /stauts_in/,
    },
    {
      label: "a non-numeric limit",
      send: () => fetch(`${server.url}/v1/agl/rollouts?limit=ten`),
      status: 400,
      type: "ValidationError",
      path: ["limit"],
    },
    {
      label: "a huge body",
      send: () => post("/v1/agl/rollouts", { input: "x".repeat(10_000) }),
      status: 413,
      type: "PayloadTooLarge",
      detail: /4096 bytes/,
    },
    // A lookup of an unknown id is `200 null` (docs/departures.md#2, checked by the conformance suite); writes stay 404.
    {
      label: "an unknown rollout id (update)",
      send: () => post("/v1/agl/rollouts/ro-000000000000", { status: "failed" }),
      status: 404,
      type: "NotFoundError",
      detail: /ro-000000000000/,
    },
    { label: "an unknown route", send: () => fetch(`${server.url}/v1/agl/rollouts/x/y/z`), status: 404, type: "RouteNotFound" },
    {
      label: "a batch with a non-object span",
      send: () => post("/v1/agl/spans/batch", { spans: [42] }),
      status: 400,
      type: "ValidationError",
      path: ["spans", 0],
    },
    { label: "a batch without its envelope", send: () => post("/v1/agl/spans/batch", [{}]), status: 400, type: "ValidationError" },
    {
      label: "a null that may not be null",
      send: () => post("/v1/agl/workers/w1", { heartbeat_stats: null }),
      status: 400,
      type: "ValidationError",
      path: ["heartbeat_stats"],
    },
  ];

  it.each(cases)("$label -> $status $type", async ({ send, status, type, detail, path }) => {
    await store.enqueueRollout({ q: 1 });
    const before = await dump();
    const res = await send();
    expect(res.status).toBe(status);
    expect(res.headers.get("content-type")).toContain("application/json");
    const body = (await res.json()) as { detail: string; error_type: string; issues?: { path: (string | number)[] }[] };
    expect(body.error_type).toBe(type);
    expect(typeof body.detail).toBe("string");
    if (detail) expect(body.detail).toMatch(detail);
    if (path)
      expect(
        body.issues!.some((i) => JSON.stringify(i.path) === JSON.stringify(path)),
        JSON.stringify(body.issues),
      ).toBe(true);
    expect(await dump()).toEqual(before);
    expect((await fetch(`${server.url}/v1/agl/health`)).status).toBe(200);
  });

  it("an illegal transition is a 409 ConflictError", async () => {
    const r = await store.startRollout(1);
    await store.updateAttempt(r.rollout_id, "latest", { status: "running" });
    const res = await post(`/v1/agl/rollouts/${r.rollout_id}/attempts/latest`, { status: "preparing" });
    expect(res.status).toBe(409);
    expect(await res.json()).toMatchObject({ error_type: "ConflictError" });
    expect((await store.getLatestAttempt(r.rollout_id))!.status).toBe("running");
  });
});

describe("bearer token", () => {
  beforeEach(() => start({ token: "s3cret-token" }));

  it("401 without it or with a wrong one (health excepted); the right one works", async () => {
    expect((await fetch(`${server.url}/v1/agl/health`)).status).toBe(200);
    const none = await fetch(`${server.url}/v1/agl/statistics`);
    expect(none.status).toBe(401);
    expect(await none.json()).toMatchObject({ error_type: "Unauthorized", detail: expect.stringMatching(/Missing bearer token/) });
    for (const auth of ["Bearer wrong", "Bearer s3cret-token-and-more", "Basic s3cret-token"]) {
      expect((await fetch(`${server.url}/v1/agl/statistics`, { headers: { authorization: auth } })).status).toBe(401);
    }
    expect((await post("/v1/agl/rollouts", { input: 1 })).status).toBe(401);
    expect((await fetch(`${server.url}/metrics`)).status).toBe(401);
    expect((await store.statistics()).total_rollouts).toBe(0);
    const ok = await fetch(`${server.url}/v1/agl/statistics`, { headers: { authorization: "Bearer s3cret-token" } });
    expect(ok.status).toBe(200);
  });

  it("the client sends its token; a wrong token is a 401 error that is not retried", async () => {
    const good = new LightningStoreClient(server.url, { token: "s3cret-token" });
    expect((await good.enqueueRollout(1)).status).toBe("queuing");
    let calls = 0;
    const bad = new LightningStoreClient(server.url, {
      token: "nope",
      retryDelays: [0.01, 0.01],
      fetch: (i, init) => (calls++, fetch(i, init)),
    });
    const err = await bad.statistics().then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(StoreHttpError);
    expect((err as StoreHttpError).status).toBe(401);
    expect(calls).toBe(1);
  });
});

describe("CORS", () => {
  beforeEach(() => start({ corsOrigins: ["http://app.example", " ", ""] }));

  it("echoes an allowed origin with credentials, answers preflights, and ignores other origins", async () => {
    const ok = await fetch(`${server.url}/v1/agl/health`, { headers: { origin: "http://app.example" } });
    expect(ok.headers.get("access-control-allow-origin")).toBe("http://app.example");
    expect(ok.headers.get("access-control-allow-credentials")).toBe("true");
    const other = await fetch(`${server.url}/v1/agl/health`, { headers: { origin: "http://evil.example" } });
    expect(other.headers.get("access-control-allow-origin")).toBeNull();
    const pre = await fetch(`${server.url}/v1/agl/rollouts`, {
      method: "OPTIONS",
      headers: {
        origin: "http://app.example",
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type,authorization",
      },
    });
    expect(pre.status).toBeLessThan(300);
    expect(pre.headers.get("access-control-allow-methods")).toContain("GET");
    expect(pre.headers.get("access-control-allow-headers")?.toLowerCase()).toContain("authorization");
  });
});

describe("metrics", () => {
  beforeEach(() => start());

  it("exports request counts and latencies by route template, store operations, queue depth and rollouts by status", async () => {
    const client = new LightningStoreClient(server.url);
    await client.enqueueManyRollouts([{ input: 1 }, { input: 2 }, { input: 3 }]);
    const r = (await client.dequeueRollout())!;
    await client.getRolloutById(r.rollout_id);
    await client.getRolloutById("ro-000000000000");
    const text = await (await fetch(`${server.url}/metrics`)).text();
    // The unknown id is a `200 null` too (docs/departures.md#2).
    expect(text).toContain('agl_http_total{path="/v1/agl/rollouts/{rollout_id}",method="GET",status="200"} 2');
    expect(text).toContain('agl_http_total{path="/v1/agl/queues/rollouts/enqueue",method="POST",status="201"} 1');
    expect(text).toMatch(/agl_http_latency_bucket\{path="\/v1\/agl\/queues\/rollouts\/dequeue",method="POST",status="200",le="\+Inf"\} 1/);
    expect(text).toContain('agl_store_total{method="enqueueManyRollouts",store_pubmeth="enqueueManyRollouts",status="OK"} 1');
    expect(text).toMatch(/agl_store_latency_count\{method="dequeueRollout",store_pubmeth="dequeueRollout",status="OK"\} 1/);
    expect(text).toContain("agl_queue_depth 2");
    expect(text).toContain('agl_rollouts{status="queuing"} 2');
    expect(text).toContain('agl_rollouts{status="preparing"} 1');
  });
});

describe("POST /v1/agl/spans/batch", () => {
  beforeEach(() => start());

  it("assigns missing sequence ids server-side in span order and keeps given ones", async () => {
    const a = await store.startRollout("a");
    const b = await store.startRollout("b");
    const { sequence_id: _x, ...noSeq } = span(a, { name: "a1" });
    const res = await post("/v1/agl/spans/batch", {
      spans: [
        noSeq,
        { ...span(b, { name: "b1" }), sequence_id: null },
        span(a, { name: "a-explicit", sequence_id: 10 }),
        { ...span(a, { name: "a2" }), sequence_id: null },
      ],
    });
    expect(res.status).toBe(201);
    const out = (await res.json()) as { name: string; sequence_id: number }[];
    expect(out.map((s) => [s.name, s.sequence_id])).toEqual([
      ["a1", 1],
      ["b1", 1],
      ["a-explicit", 10],
      ["a2", 2],
    ]);
    expect(await store.getNextSpanSequenceId(a.rollout_id, "x")).toBe(11);
  });

  it("is one transaction: a bad span anywhere stores nothing", async () => {
    const a = await store.startRollout("a");
    const res = await post("/v1/agl/spans/batch", {
      spans: [span(a, { name: "ok" }), span(a, { name: "lost", attempt_id: "at-00000000" })],
    });
    expect(res.status).toBe(404);
    expect((await store.querySpans(a.rollout_id)).total).toBe(0);
    const bad = await post("/v1/agl/spans/batch", { spans: [span(a), { ...span(a, { sequence_id: 2 }), events: "none" }] });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { issues: { path: unknown[] }[] }).issues[0]!.path).toEqual([1, "events"]);
    expect((await store.querySpans(a.rollout_id)).total).toBe(0);
  });

  it("with Prefer: return=minimal answers [index, sequence_id] for a span stored as sent, the stored span otherwise", async () => {
    const a = await store.startRollout("a");
    const first = { ...span(a, { name: "assigned" }), sequence_id: null };
    // The store drops unknown resource keys and fills a missing status description: stored != sent.
    const changed = {
      ...span(a, { name: "changed", sequence_id: 5 }),
      resource: { attributes: {}, schema_url: "", extra: 1 },
      status: { status_code: "OK" },
    };
    const duplicate = { ...span(a, { name: "again", sequence_id: 6 }), span_id: first.span_id };
    const last = span(a, { name: "last", sequence_id: 7 });
    const res = await post("/v1/agl/spans/batch", { spans: [first, changed, duplicate, last] }, { prefer: "return=minimal" });
    expect(res.status).toBe(201);
    expect(res.headers.get("preference-applied")).toBe("return=minimal");
    const stored = (await store.querySpans(a.rollout_id)).items;
    expect(stored.map((s) => s.name)).toEqual(["assigned", "changed", "last"]);
    expect(await res.json()).toEqual([[0, 1], stored[1], [3, 7]]);
    expect(stored[1]!.status.description).toBeNull();
    expect(stored[1]!.resource).toEqual({ attributes: {}, schema_url: "" });
  });

  it("without the preference answers the stored spans in full", async () => {
    const a = await store.startRollout("a");
    const res = await post("/v1/agl/spans/batch", { spans: [span(a, { name: "x" })] }, { prefer: "return=representation" });
    expect(res.headers.get("preference-applied")).toBeNull();
    expect(await res.json()).toEqual((await store.querySpans(a.rollout_id)).items);
  });

  it("the client's addManySpans returns exactly what was stored, rebuilt from the minimal answer", async () => {
    const a = await store.startRollout("a");
    const client = new LightningStoreClient(server.url);
    const first = span(a, { name: "first", sequence_id: 3 });
    const sent = [
      first,
      { ...span(a, { name: "assigned" }), sequence_id: null } as unknown as Span,
      { ...span(a, { name: "changed", sequence_id: 9 }), status: { status_code: "ERROR" } } as unknown as Span,
      { ...span(a, { name: "duplicate", sequence_id: 10 }), span_id: first.span_id },
      { ...span(a, { name: "undefined key", sequence_id: 11 }), extra: undefined } as Span,
    ];
    const out = await client.addManySpans(sent);
    // Assigned ids are taken before the batch's explicit ones raise the counter.
    const stored = (await store.querySpans(a.rollout_id)).items;
    expect(stored.map((s) => [s.name, s.sequence_id])).toEqual([
      ["assigned", 1],
      ["first", 3],
      ["changed", 9],
      ["undefined key", 11],
    ]);
    const inRequestOrder = ["first", "assigned", "changed", "undefined key"].map((n) => structuredClone(stored.find((s) => s.name === n)));
    expect(out).toStrictEqual(inRequestOrder);
    expect(sent[1]!.sequence_id).toBeNull(); // the caller's spans are left as they were
    await client.close();
  });

  it("the client takes the full answer of a server that ignores the preference", async () => {
    const a = await store.startRollout("a");
    const withoutPrefer: typeof fetch = (input, init) => {
      const { prefer: _p, ...headers } = (init?.headers ?? {}) as Record<string, string>;
      return fetch(input, { ...init, headers });
    };
    const client = new LightningStoreClient(server.url, { fetch: withoutPrefer });
    const out = await client.addManySpans([{ ...span(a, { name: "x" }), sequence_id: null } as unknown as Span]);
    expect(out).toStrictEqual((await store.querySpans(a.rollout_id)).items.map((s) => structuredClone(s)));
    expect(out[0]!.sequence_id).toBe(1);
    await client.close();
  });

  it("the client's addManySpans is one request", async () => {
    const a = await store.startRollout("a");
    let calls = 0;
    const client = new LightningStoreClient(server.url, { fetch: (i, init) => (calls++, fetch(i, init)) });
    const out = await client.addManySpans(Array.from({ length: 50 }, (_, i) => span(a, { sequence_id: i + 1, name: `s${i}` })));
    expect(out).toHaveLength(50);
    expect(calls).toBe(1);
  });
});

describe("long-poll waits", () => {
  it("a held request is answered the moment the rollout finishes", async () => {
    await start();
    const r = await store.startRollout(1);
    const t0 = performance.now();
    const res = post("/v1/agl/waits/rollouts", { rollout_ids: [r.rollout_id], timeout: 20 });
    setTimeout(() => void store.updateRollout(r.rollout_id, { status: "succeeded" }), 300);
    const got = await res;
    const elapsed = performance.now() - t0;
    expect(got.headers.get("agl-wait-settled")).toBe("true");
    expect(((await got.json()) as { rollout_id: string }[]).map((x) => x.rollout_id)).toEqual([r.rollout_id]);
    expect(elapsed).toBeGreaterThanOrEqual(290);
    expect(elapsed).toBeLessThan(1500);
  });

  it("the client waits longer than one poll by polling again", async () => {
    await start({ maxWaitSeconds: 0.3 });
    const r = await store.startRollout(1);
    let polls = 0;
    const client = new LightningStoreClient(server.url, { fetch: (i, init) => (String(i).includes("/waits/") && polls++, fetch(i, init)) });
    setTimeout(() => void store.updateRollout(r.rollout_id, { status: "failed" }), 1000);
    const t0 = performance.now();
    const done = await client.waitForRollouts({ rollout_ids: [r.rollout_id], timeout: 10 });
    expect(done.map((x) => x.status)).toEqual(["failed"]);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(950);
    expect(polls).toBeGreaterThanOrEqual(3);
  });

  it("a wait with a timeout returns what finished by then; unknown ids settle at once", async () => {
    await start({ maxWaitSeconds: 0.2 });
    const r = await store.startRollout(1);
    const client = new LightningStoreClient(server.url);
    const t0 = performance.now();
    expect(await client.waitForRollouts({ rollout_ids: [r.rollout_id], timeout: 0.7 })).toEqual([]);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(650);
    const t1 = performance.now();
    expect(await client.waitForRollouts({ rollout_ids: ["ro-000000000000"], timeout: null })).toEqual([]);
    expect(performance.now() - t1).toBeLessThan(500);
  });

  it("shutting down answers held polls at once", async () => {
    const shutdown = new AbortController();
    await start({ shutdownSignal: shutdown.signal });
    const r = await store.startRollout(1);
    const t0 = performance.now();
    const res = post("/v1/agl/waits/rollouts", { rollout_ids: [r.rollout_id], timeout: 20 });
    setTimeout(() => shutdown.abort(), 200);
    const got = await res;
    expect(got.status).toBe(200);
    expect(got.headers.get("agl-wait-settled")).toBe("false");
    expect(await got.json()).toEqual([]);
    expect(performance.now() - t0).toBeLessThan(2000);
  });
});
