/**
 * The server side of `Idempotency-Key` (src/server/idempotency.ts, docs/http-api.md): a write sent again
 * with the same key runs once and gets the first answer; another body is a 422; answers expire and are
 * bounded; a duplicate that arrives while the first still runs waits for it; no header, no change.
 */
import { afterEach, describe, expect, it } from "vitest";
import { parseStoreArgs } from "../../src/cli/store.ts";
import { createStoreApp, type StoreAppOptions } from "../../src/server/index.ts";
import { IdempotencyCache, parseIdempotencyKey } from "../../src/server/idempotency.ts";
import type { LightningStore } from "../../src/store/base.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { spanFromAttributes } from "../../src/types/index.ts";

const stores: InMemoryLightningStore[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close();
});

function setup(options: StoreAppOptions = {}, wrap: (s: LightningStore) => LightningStore = (s) => s) {
  const store = new InMemoryLightningStore({ scanDebounceSeconds: 0 });
  stores.push(store);
  const app = createStoreApp(wrap(store), options);
  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    app.request(`/v1/agl${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
    });
  const rolloutCount = async () => (await store.queryRollouts()).items.length;
  return { app, store, post, rolloutCount };
}

const enqueue = { rollouts: [{ input: { q: 1 } }] };
const key = (k: string) => ({ "idempotency-key": k });

describe("Idempotency-Key on write routes", () => {
  it("the same key twice: one write, the first answer replayed", async () => {
    const { post, rolloutCount } = setup();
    const first = await post("/queues/rollouts/enqueue", enqueue, key('"k-1"'));
    const again = await post("/queues/rollouts/enqueue", enqueue, key('"k-1"'));
    expect(first.status).toBe(201);
    expect(again.status).toBe(201);
    expect(first.headers.get("idempotent-replayed")).toBeNull();
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.headers.get("content-type")).toMatch(/application\/json/);
    expect(await again.json()).toEqual(await first.json());
    expect(await rolloutCount()).toBe(1);
  });

  it.each([
    ["startRollout", "/rollouts", { input: 1 }],
    ["addResources", "/resources", { other: { resource_type: "llm", endpoint: "http://x", model: "m" } }],
  ])("%s: one write per key", async (_name, path, body) => {
    const { post, store } = setup();
    const a = await (await post(path, body, key("k"))).json();
    const b = await (await post(path, body, key("k"))).json();
    expect(b).toEqual(a);
    const written = (await store.queryRollouts()).items.length + (await store.queryResources()).items.length;
    expect(written).toBe(1);
  });

  it("startAttempt: one attempt per key", async () => {
    const { post, store } = setup();
    const r = await store.enqueueRollout(1);
    const a = await (await post(`/rollouts/${r.rollout_id}/attempts`, {}, key("k"))).json();
    const b = await (await post(`/rollouts/${r.rollout_id}/attempts`, {}, key("k"))).json();
    expect(b).toEqual(a);
    expect((await store.queryAttempts(r.rollout_id)).items).toHaveLength(1);
  });

  it("a retried span batch gets its spans back, not an empty list of refused duplicates", async () => {
    const { post, store } = setup();
    const r = await store.startRollout(1);
    const span = spanFromAttributes({ rollout_id: r.rollout_id, attempt_id: r.attempt.attempt_id, sequence_id: 1, name: "n" });
    const first = await (await post("/spans/batch", { spans: [span] }, key("k"))).json();
    const again = await (await post("/spans/batch", { spans: [span] }, key("k"))).json();
    expect(first).toHaveLength(1);
    expect(again).toEqual(first);
    const plain = await (await post("/spans/batch", { spans: [span] })).json();
    expect(plain).toEqual([]); // without a key the store refuses the duplicate, as before
  });

  it("a retried dequeue with a key returns the same claim and claims nothing more", async () => {
    const { post, store } = setup();
    await store.enqueueRollout(1);
    await store.enqueueRollout(2);
    const a = await (await post("/queues/rollouts/dequeue", { worker_id: "w" }, key("k"))).json();
    const b = await (await post("/queues/rollouts/dequeue", { worker_id: "w" }, key("k"))).json();
    expect(b).toEqual(a);
    expect((await store.queryRollouts({ status_in: ["queuing"] })).items).toHaveLength(1);
  });

  it("without the header every request runs, as before", async () => {
    const { post, rolloutCount } = setup();
    await post("/queues/rollouts/enqueue", enqueue);
    const again = await post("/queues/rollouts/enqueue", enqueue);
    expect(again.headers.get("idempotent-replayed")).toBeNull();
    expect(await rolloutCount()).toBe(2);
  });

  it("idempotency: false ignores the header", async () => {
    const { post, rolloutCount } = setup({ idempotency: false });
    await post("/queues/rollouts/enqueue", enqueue, key("k"));
    await post("/queues/rollouts/enqueue", enqueue, key("k"));
    expect(await rolloutCount()).toBe(2);
  });

  it("the same key with a different body is a 422 and writes nothing", async () => {
    const { post, rolloutCount } = setup();
    await post("/queues/rollouts/enqueue", enqueue, key("k"));
    const res = await post("/queues/rollouts/enqueue", { rollouts: [{ input: { q: 2 } }] }, key("k"));
    expect(res.status).toBe(422);
    expect(await res.json()).toMatchObject({ error_type: "IdempotencyKeyReused", detail: expect.stringMatching(/"k".*different request/) });
    expect(await rolloutCount()).toBe(1);
  });

  it("keys are scoped by route and by token", async () => {
    // No token configured here, so requests with any Authorization header are served (as behind a proxy that checks them).
    const { post, store } = setup();
    const auth = (t: string) => ({ ...key("k"), authorization: `Bearer ${t}` });
    const a = await (await post("/queues/rollouts/enqueue", enqueue, auth("t1"))).json();
    await post("/rollouts", { input: { q: 1 } }, auth("t1"));
    const b = await (await post("/queues/rollouts/enqueue", enqueue, auth("t2"))).json();
    expect(b).not.toEqual(a);
    expect((await post("/queues/rollouts/enqueue", enqueue, auth("t1"))).headers.get("idempotent-replayed")).toBe("true");
    expect((await store.statistics()).total_rollouts).toBe(3);
  });

  it("with a server token, a request with a wrong token never reaches the cache", async () => {
    const { post, rolloutCount } = setup({ token: "t1" });
    expect((await post("/queues/rollouts/enqueue", enqueue, { ...key("k"), authorization: "Bearer t1" })).status).toBe(201);
    expect((await post("/queues/rollouts/enqueue", enqueue, { ...key("k"), authorization: "Bearer t2" })).status).toBe(401);
    expect(await rolloutCount()).toBe(1);
  });

  it("the quoted (structured-field) and bare forms are the same key", async () => {
    const { post, rolloutCount } = setup();
    await post("/queues/rollouts/enqueue", enqueue, key('"abc"'));
    const again = await post("/queues/rollouts/enqueue", enqueue, key("abc"));
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(await rolloutCount()).toBe(1);
  });

  it.each([
    ["empty", '""', /must not be empty/],
    ["too long", "x".repeat(256), /at most 255/],
    ["not ASCII", '"clé"', /printable ASCII/],
  ])("a bad key (%s) is a 400 naming the header, and nothing is written", async (_l, value, message) => {
    const { post, rolloutCount } = setup();
    const res = await post("/queues/rollouts/enqueue", enqueue, key(value));
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error_type: string; issues: { path: string[]; message: string }[] };
    expect(body.error_type).toBe("ValidationError");
    expect(body.issues[0]!.path).toEqual(["idempotency-key"]);
    expect(body.issues[0]!.message).toMatch(message);
    expect(await rolloutCount()).toBe(0);
  });

  it("a 4xx answer is replayed; a 5xx is not remembered and the retry runs", async () => {
    let failNext = true;
    const { post, rolloutCount } = setup(
      {},
      (s) =>
        new Proxy(s, {
          get(t, p) {
            if (p === "enqueueRollout" && failNext) {
              return async () => {
                failNext = false;
                throw new Error("disk on fire");
              };
            }
            const v = Reflect.get(t, p, t) as unknown;
            return typeof v === "function" ? v.bind(t) : v;
          },
        }),
    );
    expect((await post("/queues/rollouts/enqueue", enqueue, key("k5"))).status).toBe(500);
    const retried = await post("/queues/rollouts/enqueue", enqueue, key("k5"));
    expect(retried.status).toBe(201);
    expect(retried.headers.get("idempotent-replayed")).toBeNull();
    expect(await rolloutCount()).toBe(1);

    const bad = { rollouts: [{ input: 1, mode: 5 }] };
    const first = await post("/queues/rollouts/enqueue", bad, key("k4"));
    const again = await post("/queues/rollouts/enqueue", bad, key("k4"));
    expect([first.status, again.status]).toEqual([400, 400]);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
  });

  it("a duplicate that arrives while the first still runs waits for it: one write, one answer", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let calls = 0;
    let entered!: () => void;
    const inside = new Promise<void>((r) => (entered = r));
    const { post, rolloutCount } = setup(
      {},
      (s) =>
        new Proxy(s, {
          get(t, p) {
            const v = Reflect.get(t, p, t) as unknown;
            if (p !== "enqueueRollout") return typeof v === "function" ? v.bind(t) : v;
            return async (...args: unknown[]) => {
              calls++;
              entered();
              await gate;
              return (v as (...a: unknown[]) => Promise<unknown>).apply(t, args);
            };
          },
        }),
    );
    const first = post("/queues/rollouts/enqueue", enqueue, key("k"));
    await inside;
    const second = post("/queues/rollouts/enqueue", enqueue, key("k"));
    const mismatched = post("/queues/rollouts/enqueue", { rollouts: [{ input: 9 }] }, key("k"));
    // The mismatch is refused while the first is still held; the duplicate is not answered yet.
    expect((await mismatched).status).toBe(422);
    release();
    const [a, b] = await Promise.all([first, second]);
    expect(await b.json()).toEqual(await a.json());
    expect(b.headers.get("idempotent-replayed")).toBe("true");
    expect(calls).toBe(1);
    expect(await rolloutCount()).toBe(1);
  });

  it("an answer expires after the TTL: the same key then runs again", async () => {
    let now = 1_000_000;
    const { post, rolloutCount } = setup({ idempotency: { ttlSeconds: 60, now: () => now } });
    await post("/queues/rollouts/enqueue", enqueue, key("k"));
    now += 59_000;
    expect((await post("/queues/rollouts/enqueue", enqueue, key("k"))).headers.get("idempotent-replayed")).toBe("true");
    now += 2_000;
    expect((await post("/queues/rollouts/enqueue", enqueue, key("k"))).headers.get("idempotent-replayed")).toBeNull();
    expect(await rolloutCount()).toBe(2);
  });

  it("at most maxKeys answers are kept; the least recently used goes first", async () => {
    const { post, rolloutCount } = setup({ idempotency: { maxKeys: 2 } });
    for (const k of ["a", "b"]) await post("/queues/rollouts/enqueue", enqueue, key(k));
    await post("/queues/rollouts/enqueue", enqueue, key("a")); // a becomes the most recently used
    await post("/queues/rollouts/enqueue", enqueue, key("c")); // evicts b
    expect(await rolloutCount()).toBe(3);
    expect((await post("/queues/rollouts/enqueue", enqueue, key("a"))).headers.get("idempotent-replayed")).toBe("true");
    expect((await post("/queues/rollouts/enqueue", enqueue, key("b"))).headers.get("idempotent-replayed")).toBeNull();
    expect(await rolloutCount()).toBe(4);
  });

  it("an answer over maxBytes is not kept, and the server says so", async () => {
    const warnings: string[] = [];
    const log = { debug() {}, info() {}, error() {}, warning: (m: string) => void warnings.push(m) };
    const { post, rolloutCount } = setup({ idempotency: { maxBytes: 100 }, log });
    await post("/queues/rollouts/enqueue", { rollouts: [{ input: "x".repeat(200) }] }, key("k"));
    await post("/queues/rollouts/enqueue", { rollouts: [{ input: "x".repeat(200) }] }, key("k"));
    expect(await rolloutCount()).toBe(2);
    expect(warnings.join("\n")).toMatch(/over the idempotency cache's 100 bytes/);
  });
});

describe("Idempotency-Key from a browser", () => {
  it("preflights allow the header; a replay keeps the CORS headers and exposes idempotent-replayed", async () => {
    const { app, post } = setup({ corsOrigins: ["http://app.example"] });
    const pre = await app.request("/v1/agl/queues/rollouts/enqueue", {
      method: "OPTIONS",
      headers: {
        origin: "http://app.example",
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type, idempotency-key",
      },
    });
    expect(pre.headers.get("access-control-allow-headers")).toMatch(/idempotency-key/);
    const origin = { origin: "http://app.example", ...key("k") };
    await post("/queues/rollouts/enqueue", enqueue, origin);
    const replay = await post("/queues/rollouts/enqueue", enqueue, origin);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(replay.headers.get("access-control-allow-origin")).toBe("http://app.example");
    expect(replay.headers.get("access-control-expose-headers")).toMatch(/idempotent-replayed/);
  });
});

describe("IdempotencyCache and its settings", () => {
  it("keeps total bytes under maxBytes by evicting the oldest answers", () => {
    const c = new IdempotencyCache({ maxBytes: 10 });
    const answer = (n: number) => ({ fingerprint: "f", status: 200, headers: [], body: new Uint8Array(n) });
    expect(c.remember("a", answer(4))).toBe(true);
    expect(c.remember("b", answer(4))).toBe(true);
    expect(c.remember("c", answer(4))).toBe(true);
    expect([c.answer("a"), c.answer("b") !== undefined, c.answer("c") !== undefined]).toEqual([undefined, true, true]);
    expect(c.remember("d", answer(11))).toBe(false);
  });

  it("refuses bounds that are not positive", () => {
    expect(() => new IdempotencyCache({ ttlSeconds: 0 })).toThrow(RangeError);
    expect(() => new IdempotencyCache({ maxKeys: 0 })).toThrow(RangeError);
    expect(() => new IdempotencyCache({ maxBytes: 1.5 })).toThrow(RangeError);
  });

  it("parses the draft's escaped string form", () => {
    expect(parseIdempotencyKey('"a\\"b"')).toBe('a"b');
    expect(parseIdempotencyKey("  plain ")).toBe("plain");
  });

  it("agl store flags set the bounds; the defaults are 600 s, 10,000 keys, 64 MiB", () => {
    expect(parseStoreArgs([]).idempotency).toEqual({ ttlSeconds: 600, maxKeys: 10_000, maxBytes: 64 * 1024 * 1024 });
    expect(parseStoreArgs(["--idempotency-ttl", "30", "--idempotency-keys=5", "--idempotency-bytes", "1000"]).idempotency).toEqual({
      ttlSeconds: 30,
      maxKeys: 5,
      maxBytes: 1000,
    });
    expect(() => parseStoreArgs(["--idempotency-ttl", "0"])).toThrow(/--idempotency-ttl must be an integer/);
  });
});
