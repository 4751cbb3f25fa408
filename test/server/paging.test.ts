/**
 * List routes answer at most one page (docs/departures.md#22): the default page without `limit`, the
 * maximum for `limit=-1` or anything larger; the envelope stays `{items, limit, offset, total}` with the
 * page size used. Large pages are streamed, byte for byte what one JSON string would be. The client
 * pages through, so its queries still return everything the caller asked for.
 */
import { describe, expect, it } from "vitest";
import { LightningStoreClient } from "../../src/client/index.ts";
import { DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, createStoreApp, type StoreAppOptions } from "../../src/server/index.ts";
import type { LightningStore } from "../../src/store/base.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { ValidationError, spanFromAttributes, type PaginatedResult } from "../../src/types/index.ts";

const N = 25;

/** A store with N of everything: rollouts, attempts of one rollout, spans of it, workers, resources. */
async function seeded() {
  const store = new InMemoryLightningStore({ scanDebounceSeconds: 0 });
  const r = await store.startRollout({ i: 0 });
  for (let i = 1; i < N; i++) await store.enqueueRollout({ i });
  for (let i = 1; i < N; i++) await store.startAttempt(r.rollout_id);
  const latest = (await store.getLatestAttempt(r.rollout_id))!.attempt_id;
  await store.addManySpans(
    Array.from({ length: N }, (_, i) =>
      spanFromAttributes({ rollout_id: r.rollout_id, attempt_id: latest, sequence_id: i + 1, name: `s${i}` }),
    ),
  );
  for (let i = 0; i < N; i++) await store.updateWorker(`w${String(i).padStart(2, "0")}`, { i });
  for (let i = 0; i < N; i++) await store.addResources({ p: { resource_type: "prompt_template", template: `t${i}`, engine: "f-string" } });
  return { store, rid: r.rollout_id };
}

type Lister = (store: LightningStore, page: { limit?: number; offset?: number }) => Promise<PaginatedResult<unknown>>;

/** Each list route as [name, GET or POST request for a page, the store call it serves]. */
const routes = (rid: string): [string, (page: Record<string, number>) => [string, RequestInit?], Lister][] => {
  const get =
    (path: string, extra: Record<string, string> = {}) =>
    (page: Record<string, number>) =>
      [`${path}?${new URLSearchParams({ ...extra, ...Object.fromEntries(Object.entries(page).map(([k, v]) => [k, String(v)])) })}`] as [
        string,
      ];
  const post =
    (path: string, extra: Record<string, unknown> = {}) =>
    (page: Record<string, number>) =>
      [path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ ...extra, ...page }) }] as [
        string,
        RequestInit,
      ];
  return [
    ["GET rollouts", get("/v1/agl/rollouts"), (s, p) => s.queryRollouts(p)],
    ["POST rollouts/search", post("/v1/agl/rollouts/search"), (s, p) => s.queryRollouts(p)],
    ["GET attempts", get(`/v1/agl/rollouts/${rid}/attempts`), (s, p) => s.queryAttempts(rid, p)],
    ["POST attempts/search", post(`/v1/agl/rollouts/${rid}/attempts/search`), (s, p) => s.queryAttempts(rid, p)],
    ["GET spans", get("/v1/agl/spans", { rollout_id: rid }), (s, p) => s.querySpans(rid, p)],
    ["POST spans/search", post("/v1/agl/spans/search", { rollout_id: rid }), (s, p) => s.querySpans(rid, p)],
    ["GET workers", get("/v1/agl/workers"), (s, p) => s.queryWorkers(p)],
    ["POST workers/search", post("/v1/agl/workers/search"), (s, p) => s.queryWorkers(p)],
    ["GET resources", get("/v1/agl/resources"), (s, p) => s.queryResources(p)],
  ];
};

describe("page sizes of the list routes", () => {
  it("no limit gives the default page, -1 and larger limits the maximum, smaller limits their own; the envelope says which", async () => {
    const { store, rid } = await seeded();
    const app = createStoreApp(store, { defaultPageSize: 10, maxPageSize: 20 });
    for (const [name, request, list] of routes(rid)) {
      const cases: [Record<string, number>, { limit: number; offset: number }][] = [
        [{}, { limit: 10, offset: 0 }],
        [{ limit: -1 }, { limit: 20, offset: 0 }],
        [{ limit: 1_000_000 }, { limit: 20, offset: 0 }],
        [
          { limit: 5, offset: 22 },
          { limit: 5, offset: 22 },
        ],
        [{ limit: 0 }, { limit: 0, offset: 0 }],
        [{ offset: 18 }, { limit: 10, offset: 18 }],
      ];
      for (const [page, used] of cases) {
        const res = await app.request(...request(page));
        expect(res.status, `${name} ${JSON.stringify(page)}`).toBe(200);
        const body = (await res.json()) as PaginatedResult<unknown>;
        const expected = await list(store, used);
        expect(body, `${name} ${JSON.stringify(page)}`).toEqual(JSON.parse(JSON.stringify(expected)));
        expect(Object.keys(body)).toEqual(["items", "limit", "offset", "total"]);
        expect(body.total).toBe(N);
      }
    }
    await store.close();
  });

  it(`the defaults are ${DEFAULT_PAGE_SIZE} and ${MAX_PAGE_SIZE} items`, async () => {
    const store = new InMemoryLightningStore();
    await store.enqueueManyRollouts(Array.from({ length: DEFAULT_PAGE_SIZE + 1 }, (_, i) => ({ input: i })));
    const app = createStoreApp(store);
    const page = (await (await app.request("/v1/agl/rollouts")).json()) as PaginatedResult<unknown>;
    expect([page.items.length, page.limit, page.total]).toEqual([DEFAULT_PAGE_SIZE, DEFAULT_PAGE_SIZE, DEFAULT_PAGE_SIZE + 1]);
    const all = (await (await app.request("/v1/agl/rollouts?limit=-1")).json()) as PaginatedResult<unknown>;
    expect([all.items.length, all.limit]).toEqual([DEFAULT_PAGE_SIZE + 1, MAX_PAGE_SIZE]);
    await store.close();
  });

  it("a dequeue claims at most the maximum page; the rest stay queued", async () => {
    const store = new InMemoryLightningStore();
    await store.enqueueManyRollouts(Array.from({ length: 30 }, (_, i) => ({ input: i })));
    const app = createStoreApp(store, { defaultPageSize: 5, maxPageSize: 20 });
    const res = await app.request("/v1/agl/queues/rollouts/dequeue", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: '{"limit":1000}',
    });
    expect(((await res.json()) as unknown[]).length).toBe(20);
    expect((await store.queryRollouts({ status_in: ["queuing"] })).total).toBe(10);
    await store.close();
  });

  it("a large page is streamed, byte for byte the JSON of the store's answer", async () => {
    const store = new InMemoryLightningStore();
    // Items with quotes, unicode and nesting, enough for several stream chunks.
    await store.enqueueManyRollouts(
      Array.from({ length: 3_000 }, (_, i) => ({ input: { i, text: `"q" \u00e9 \u2028 ${"x".repeat(200)}`, nested: [{ a: [i] }] } })),
    );
    const app = createStoreApp(store);
    const res = await app.request("/v1/agl/rollouts?limit=2500&offset=100");
    expect(res.headers.get("content-type")).toContain("application/json");
    const text = await res.text();
    expect(text).toBe(JSON.stringify(await store.queryRollouts({ limit: 2500, offset: 100 })));
    await store.close();
  });

  it("a page ends early once it holds maxPageChars of JSON, and its limit says how many items it holds", async () => {
    const { store, rid } = await seeded();
    const app = createStoreApp(store, { maxPageChars: 1_000 });
    for (const [name, request, list] of routes(rid)) {
      const all = JSON.parse(JSON.stringify(await list(store, {}))) as PaginatedResult<unknown>;
      const body = (await (await app.request(...request({ limit: 20, offset: 2 }))).json()) as PaginatedResult<unknown>;
      // Items until the JSON written reaches 1,000 characters: the item that passes it is the last one.
      let n = 0;
      for (let chars = 0; chars < 1_000 && n < 20; n++) chars += JSON.stringify(all.items[2 + n]).length + 1;
      expect(body.items.length, name).toBe(n);
      expect(body, name).toEqual({ items: all.items.slice(2, 2 + n), limit: n, offset: 2, total: N });
    }
    // One item heavier than the cap still makes a page of one.
    const heavy = createStoreApp(store, { maxPageChars: 10 });
    const one = (await (await heavy.request("/v1/agl/rollouts?limit=5")).json()) as PaginatedResult<unknown>;
    expect([one.items.length, one.limit, one.total]).toEqual([1, 1, N]);
    await store.close();
  });

  it("sizes are checked when the app is built", () => {
    const store = new InMemoryLightningStore();
    const bad: StoreAppOptions[] = [
      { defaultPageSize: 0 },
      { maxPageSize: 1.5 },
      { defaultPageSize: 20, maxPageSize: 10 },
      { maxPageSize: -1 },
      { maxPageChars: 0 },
    ];
    for (const options of bad) expect(() => createStoreApp(store, options), JSON.stringify(options)).toThrow(ValidationError);
  });
});

describe("LightningStoreClient pages through", () => {
  const clientFor = (store: LightningStore, options: StoreAppOptions) => {
    const app = createStoreApp(store, options);
    const requests: string[] = [];
    const client = new LightningStoreClient("http://store.test", {
      retryDelays: [],
      fetch: async (input, init) => {
        requests.push(String(input));
        return app.fetch(new Request(input, init));
      },
    });
    return { client, requests };
  };

  it.each([
    ["pages of 7 items", { defaultPageSize: 3, maxPageSize: 7 }],
    ["pages cut at 1,000 characters", { maxPageChars: 1_000 }],
  ] as [string, StoreAppOptions][])(
    "%s: each query returns what the store gives in process, for no limit, -1, a large limit, and offsets",
    async (label, options) => {
      const { store, rid } = await seeded();
      const { client, requests } = clientFor(store, options);
      const queries: [string, (s: LightningStore, p: { limit?: number; offset?: number }) => Promise<PaginatedResult<unknown>>][] = [
        ["rollouts", (s, p) => s.queryRollouts(p)],
        ["attempts", (s, p) => s.queryAttempts(rid, p)],
        ["spans", (s, p) => s.querySpans(rid, p)],
        ["workers", (s, p) => s.queryWorkers(p)],
        ["resources", (s, p) => s.queryResources(p)],
      ];
      for (const [name, q] of queries) {
        for (const page of [
          {},
          { limit: -1 },
          { limit: 16 },
          { limit: 16, offset: 4 },
          { offset: 20 },
          { limit: 2, offset: 1 },
          { limit: 0 },
        ]) {
          requests.length = 0;
          const got = await q(client, page);
          expect(got, `${name} ${JSON.stringify(page)}`).toEqual(JSON.parse(JSON.stringify(await q(store, page))));
          const want = Math.min(page.limit === undefined || page.limit === -1 ? Infinity : page.limit, N - (page.offset ?? 0));
          // Pages of 7: as few requests as that allows.
          if (options.maxPageSize === 7) expect(requests.length, `${name} ${JSON.stringify(page)}`).toBe(Math.max(1, Math.ceil(want / 7)));
          else if (want > 10) expect(requests.length, `${label}: ${name} ${JSON.stringify(page)}`).toBeGreaterThan(1);
        }
      }
      await store.close();
    },
  );

  it("a server that answers everything at once takes one request", async () => {
    const { store } = await seeded();
    const { client, requests } = clientFor(store, { maxPageSize: 1_000_000 });
    expect((await client.queryRollouts()).items).toHaveLength(N);
    expect(requests).toHaveLength(1);
    await store.close();
  });

  it("a bad limit is still the server's 400", async () => {
    const { store } = await seeded();
    const { client } = clientFor(store, { maxPageSize: 7 });
    await expect(client.queryRollouts({ limit: -5 })).rejects.toThrow(ValidationError);
    await store.close();
  });
});
