/**
 * List routes answer every match for no limit and `limit=-1`, as upstream (docs/http-api.md#list-answers),
 * read from the store in batches and streamed, byte for byte what one JSON string would be. Page caps are
 * opt-in and say when they cut a page (`truncated_by`). The client pages through capped pages, so its
 * queries still return everything the caller asked for.
 */
import { describe, expect, it } from "vitest";
import { LightningStoreClient } from "../../src/client/index.ts";
import { MAX_DEQUEUE_SIZE, createStoreApp, type PageCut, type StoreAppOptions } from "../../src/server/index.ts";
import { FIRST_READ, MAX_READ, READ_CHARS } from "../../src/server/paging.ts";
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

describe("list answers", () => {
  it("without caps, no limit and limit=-1 answer every match as upstream does, the envelope echoing the limit", async () => {
    const { store, rid } = await seeded();
    const app = createStoreApp(store);
    for (const [name, request, list] of routes(rid)) {
      const cases: [Record<string, number>, { limit: number; offset: number }][] = [
        [{}, { limit: -1, offset: 0 }],
        [{ limit: -1 }, { limit: -1, offset: 0 }],
        [{ limit: 1_000_000 }, { limit: 1_000_000, offset: 0 }],
        [
          { limit: 5, offset: 22 },
          { limit: 5, offset: 22 },
        ],
        [{ limit: 0 }, { limit: 0, offset: 0 }],
        [{ offset: 18 }, { limit: -1, offset: 18 }],
      ];
      for (const [page, used] of cases) {
        const res = await app.request(...request(page));
        expect(res.status, `${name} ${JSON.stringify(page)}`).toBe(200);
        const body = (await res.json()) as PaginatedResult<unknown>;
        expect(body, `${name} ${JSON.stringify(page)}`).toEqual(JSON.parse(JSON.stringify(await list(store, used))));
        expect(Object.keys(body)).toEqual(["items", "limit", "offset", "total"]);
        expect(body.total).toBe(N);
      }
    }
    await store.close();
  });

  it("opt-in caps: the default page and the maximum; a page one of them cuts short names it in truncated_by", async () => {
    const { store, rid } = await seeded();
    const app = createStoreApp(store, { defaultPageSize: 10, maxPageSize: 20 });
    for (const [name, request, list] of routes(rid)) {
      const cases: [Record<string, number>, { limit: number; offset: number }, PageCut | undefined][] = [
        [{}, { limit: 10, offset: 0 }, "page_size"],
        [{ limit: -1 }, { limit: 20, offset: 0 }, "max_page_size"],
        [{ limit: 1_000_000 }, { limit: 20, offset: 0 }, "max_page_size"],
        [{ limit: 5, offset: 22 }, { limit: 5, offset: 22 }, undefined],
        [{ limit: 5 }, { limit: 5, offset: 0 }, undefined],
        [{ limit: 0 }, { limit: 0, offset: 0 }, undefined],
        // The cap holds every match from the offset on: nothing was cut.
        [{ offset: 18 }, { limit: 10, offset: 18 }, undefined],
        [{ limit: -1, offset: 5 }, { limit: 20, offset: 5 }, undefined],
      ];
      for (const [page, used, cut] of cases) {
        const body = (await (await app.request(...request(page))).json()) as PaginatedResult<unknown> & { truncated_by?: string };
        const expected = JSON.parse(JSON.stringify(await list(store, used))) as PaginatedResult<unknown>;
        expect(body, `${name} ${JSON.stringify(page)}`).toEqual(cut === undefined ? expected : { ...expected, truncated_by: cut });
        expect(body.total).toBe(N);
      }
    }
    await store.close();
  });

  /** The store with its `queryRollouts` calls recorded. */
  const recordingReads = (store: LightningStore) => {
    const reads: { limit: number; offset: number }[] = [];
    const recorded = Object.create(store) as LightningStore;
    recorded.queryRollouts = (q) => {
      reads.push({ limit: q?.limit ?? -1, offset: q?.offset ?? 0 });
      return store.queryRollouts(q);
    };
    return { recorded, reads };
  };

  it("an answer larger than one store read is read in batches and streamed, byte for byte the store's answer", async () => {
    const store = new InMemoryLightningStore();
    // Items with quotes, unicode and nesting, enough for several reads and stream chunks.
    const n = 2 * MAX_READ;
    await store.enqueueManyRollouts(
      Array.from({ length: n }, (_, i) => ({ input: { i, text: `"q" \u00e9 \u2028 ${"x".repeat(20)}`, nested: [{ a: [i] }] } })),
    );
    const { recorded, reads } = recordingReads(store);
    const app = createStoreApp(recorded);
    const all = await store.queryRollouts();
    // Small items: after the first read, each read takes the most one read may.
    expect(JSON.stringify(all.items.at(-1)).length).toBeLessThan(READ_CHARS / MAX_READ);
    for (const [url, query, limits] of [
      ["/v1/agl/rollouts", {}, [FIRST_READ, MAX_READ, MAX_READ]],
      ["/v1/agl/rollouts?limit=-1", {}, [FIRST_READ, MAX_READ, MAX_READ]],
      [
        `/v1/agl/rollouts?limit=${n - 200}&offset=100`,
        { limit: n - 200, offset: 100 },
        [FIRST_READ, MAX_READ, n - 200 - FIRST_READ - MAX_READ],
      ],
    ] as const) {
      reads.length = 0;
      const res = await app.request(url);
      expect(res.headers.get("content-type")).toContain("application/json");
      expect(await res.text(), url).toBe(JSON.stringify(await store.queryRollouts(query)));
      expect(
        reads.map((r) => r.limit),
        url,
      ).toEqual(limits);
    }
    expect(reads.map((r) => r.offset)).toEqual([100, 100 + FIRST_READ, 100 + FIRST_READ + MAX_READ]);
    await store.close();
  });

  it("reads of large items hold about READ_CHARS of JSON each", async () => {
    const store = new InMemoryLightningStore();
    const itemChars = 64 * 1024;
    await store.enqueueManyRollouts(Array.from({ length: FIRST_READ + 300 }, (_, i) => ({ input: { i, text: "y".repeat(itemChars) } })));
    const { recorded, reads } = recordingReads(store);
    const body = (await (await createStoreApp(recorded).request("/v1/agl/rollouts")).json()) as PaginatedResult<{ input: { i: number } }>;
    expect(body.items.map((r) => r.input.i)).toEqual(Array.from({ length: FIRST_READ + 300 }, (_, i) => i));
    const later = reads.slice(1).map((r) => r.limit);
    // Each item is a little more than itemChars of JSON: a read holds just under READ_CHARS.
    expect(later.slice(0, -1).every((l) => l === later[0])).toBe(true);
    expect(later[0]).toBeLessThan(READ_CHARS / itemChars);
    expect(later[0]).toBeGreaterThan((READ_CHARS / itemChars) * 0.9);
    expect(reads.map((r) => r.offset)).toEqual(reads.map((_, k) => FIRST_READ + (k - 1) * later[0]!).with(0, 0));
    await store.close();
  });

  it("an answer ends at the total counted by its first read, though rows are added while it is written", async () => {
    const store = new InMemoryLightningStore();
    await store.enqueueManyRollouts(Array.from({ length: FIRST_READ + 10 }, (_, i) => ({ input: i })));
    const growing = Object.create(store) as LightningStore;
    growing.queryRollouts = async (q) => {
      const page = await store.queryRollouts(q);
      await store.enqueueManyRollouts(Array.from({ length: 5 }, (_, i) => ({ input: -i })));
      return page;
    };
    const body = (await (await createStoreApp(growing).request("/v1/agl/rollouts")).json()) as PaginatedResult<{ input: number }>;
    expect([body.items.length, body.total]).toEqual([FIRST_READ + 10, FIRST_READ + 10]);
    expect(body.items.map((r) => r.input)).toEqual(Array.from({ length: FIRST_READ + 10 }, (_, i) => i));
    await store.close();
  });

  it("a store error after the first read ends the stream with an error, never with a well-formed short page", async () => {
    const store = new InMemoryLightningStore();
    await store.enqueueManyRollouts(Array.from({ length: 3 * FIRST_READ }, (_, i) => ({ input: { i, text: "x".repeat(300) } })));
    const failing = Object.create(store) as LightningStore;
    failing.queryRollouts = async (q) => {
      if ((q?.offset ?? 0) > 0) throw new Error("disk on fire");
      return store.queryRollouts(q);
    };
    const errors: [string, unknown][] = [];
    const log = { debug() {}, info() {}, warning() {}, error: (m: string, e?: unknown) => errors.push([m, e]) };
    const res = await createStoreApp(failing, { log }).request("/v1/agl/rollouts");
    expect(res.status).toBe(200);
    await expect(res.text()).rejects.toThrow("disk on fire");
    expect(errors).toEqual([
      [
        expect.stringMatching(/^a list answer failed after \d+ of its 1500 items; its stream ends with an error$/),
        new Error("disk on fire"),
      ],
    ]);
    await store.close();
  });

  it("a bad limit or offset is still a 400 naming it", async () => {
    const { store } = await seeded();
    const app = createStoreApp(store, { maxPageSize: 10 });
    for (const [url, path] of [
      ["/v1/agl/rollouts?limit=-2", "limit"],
      ["/v1/agl/rollouts?offset=-1", "offset"],
      ["/v1/agl/workers?limit=1.5", "limit"],
    ] as const) {
      const res = await app.request(url);
      expect(res.status, url).toBe(400);
      expect(JSON.stringify(await res.json()), url).toContain(path);
    }
    await store.close();
  });

  it(`a dequeue claims at most the maximum page, or ${MAX_DEQUEUE_SIZE} without one; the rest stay queued`, async () => {
    const store = new InMemoryLightningStore();
    await store.enqueueManyRollouts(Array.from({ length: MAX_DEQUEUE_SIZE + 30 }, (_, i) => ({ input: i })));
    const dequeue = (app: ReturnType<typeof createStoreApp>, limit: number) =>
      app.request("/v1/agl/queues/rollouts/dequeue", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ limit }),
      });
    const capped = createStoreApp(store, { defaultPageSize: 5, maxPageSize: 20 });
    expect(((await (await dequeue(capped, 1000)).json()) as unknown[]).length).toBe(20);
    const uncapped = createStoreApp(store);
    expect(((await (await dequeue(uncapped, 1_000_000)).json()) as unknown[]).length).toBe(MAX_DEQUEUE_SIZE);
    expect((await store.queryRollouts({ status_in: ["queuing"] })).total).toBe(10);
    await store.close();
  });

  it("a page ends early once it holds maxPageChars of JSON; its limit says how many items it holds, truncated_by why", async () => {
    const { store, rid } = await seeded();
    const app = createStoreApp(store, { maxPageChars: 1_000 });
    for (const [name, request, list] of routes(rid)) {
      const all = JSON.parse(JSON.stringify(await list(store, {}))) as PaginatedResult<unknown>;
      const body = (await (await app.request(...request({ limit: 20, offset: 2 }))).json()) as PaginatedResult<unknown>;
      // Items until the JSON written reaches 1,000 characters: the item that passes it is the last one.
      let n = 0;
      for (let chars = 0; chars < 1_000 && n < 20; n++) chars += JSON.stringify(all.items[2 + n]).length + 1;
      expect(body.items.length, name).toBe(n);
      expect(body, name).toEqual({ items: all.items.slice(2, 2 + n), limit: n, offset: 2, total: N, truncated_by: "max_page_chars" });
    }
    // One item heavier than the cap still makes a page of one.
    const heavy = createStoreApp(store, { maxPageChars: 10 });
    const one = (await (await heavy.request("/v1/agl/rollouts?limit=5")).json()) as PaginatedResult<unknown>;
    expect([one.items.length, one.limit, one.total]).toEqual([1, 1, N]);
    await store.close();
  });

  it("caps are checked when the app is built", () => {
    const store = new InMemoryLightningStore();
    const bad: StoreAppOptions[] = [
      { defaultPageSize: 0 },
      { maxPageSize: 1.5 },
      { defaultPageSize: 20, maxPageSize: 10 },
      { maxPageSize: -1 },
      { maxPageChars: 0 },
    ];
    for (const options of bad) expect(() => createStoreApp(store, options), JSON.stringify(options)).toThrow(ValidationError);
    expect(() => createStoreApp(store, { defaultPageSize: 20, maxPageSize: null })).not.toThrow();
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

  it("a server without caps answers everything at once: one request", async () => {
    const { store } = await seeded();
    const { client, requests } = clientFor(store, {});
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
