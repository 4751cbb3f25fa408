/**
 * Web pages against a store server without a token, in real Chromium (docs/server.md, "What a server
 * without a token trusts"): a page on another origin posts with `mode: "no-cors"` and a Blob body (no
 * Content-Type, no preflight) and nothing is stored; a page whose name rebinds to 127.0.0.1 gets 403
 * until its name is allowed; a page on an origin allowed by CORS still writes.
 */
import { serve } from "@hono/node-server";
import type { AddressInfo } from "node:net";
import type { Browser, Page } from "playwright-core";
import { request } from "undici";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createStoreApp, type StoreAppOptions } from "../../src/server/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { launchChromium, noChromium, openPage, type PageServer, servePages } from "./chromium.ts";

/** A name the browser resolves to 127.0.0.1, as a rebinding attacker's DNS would answer. */
const REBOUND = "attacker.example";
/** The path at which the test's server hands out the rebinding page (no store route). */
const ATTACK_PAGE = "/__rebinding_page__";

interface Seen {
  method: string;
  path: string;
  host: string | null;
  origin: string | null;
  site: string | null;
  contentType: string | null;
  status: number;
}

interface Store {
  url: string;
  port: number;
  seen: Seen[];
  close(): Promise<void>;
}

const running: Store[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((s) => s.close()));
});

/** A store without a token on 127.0.0.1, recording the headers Chromium sends and the status answered. */
async function startStore(options: StoreAppOptions = {}): Promise<Store> {
  const store = new InMemoryLightningStore();
  const app = createStoreApp(store, options);
  const seen: Seen[] = [];
  const record = async (req: Request): Promise<Response> => {
    // The attacker's page, as its server sent it before the name rebound (see reboundPage).
    if (new URL(req.url).pathname === ATTACK_PAGE)
      return new Response("<!doctype html><title>rebinding</title>", { headers: { "content-type": "text/html" } });
    const res = await app.fetch(req);
    const h = req.headers;
    seen.push({
      method: req.method,
      path: new URL(req.url).pathname,
      host: h.get("host"),
      origin: h.get("origin"),
      site: h.get("sec-fetch-site"),
      contentType: h.get("content-type"),
      status: res.status,
    });
    return res;
  };
  const server = await new Promise<ReturnType<typeof serve>>((ok) => {
    const s = serve({ fetch: record, hostname: "127.0.0.1", port: 0 }, () => ok(s));
  });
  const { port } = server.address() as AddressInfo;
  const started: Store = {
    url: `http://127.0.0.1:${port}`,
    port,
    seen,
    close: async () => {
      await new Promise<void>((ok) => server.close(() => ok()));
      await store.close();
    },
  };
  running.push(started);
  return started;
}

const ENQUEUE = { rollouts: [{ input: { injected: "by a web page" } }] };
const TEMPLATE = { prompt: { resource_type: "prompt_template", template: "INJECTED BY A WEB PAGE", engine: "f-string" } };

/** What the attack page runs: the two writes as `no-cors` posts of a Blob, which carry no Content-Type. */
async function noCorsBlobPosts(page: Page, base: string): Promise<void> {
  await page.evaluate(
    async ({ base, enqueue, template }) => {
      const post = (path: string, body: unknown) =>
        fetch(base + path, { method: "POST", mode: "no-cors", body: new Blob([JSON.stringify(body)]) });
      await post("/v1/agl/queues/rollouts/enqueue", enqueue);
      await post("/v1/agl/resources", template);
    },
    { base, enqueue: ENQUEUE, template: TEMPLATE },
  );
}

/** Asked over HTTP, as a client of the store: rollouts stored and the latest resources. */
async function stored(store: Store): Promise<{ rollouts: number; latest: unknown }> {
  const rollouts = (await (await fetch(`${store.url}/v1/agl/rollouts`)).json()) as { items: unknown[] };
  const latest = await (await fetch(`${store.url}/v1/agl/resources/latest`)).json();
  return { rollouts: rollouts.items.length, latest };
}

describe.skipIf(noChromium)("web pages against a store without a token (Chromium)", { timeout: 120_000 }, () => {
  let browser: Browser;
  let pages: PageServer;

  beforeAll(async () => {
    browser = await launchChromium([`--host-resolver-rules=MAP ${REBOUND} 127.0.0.1`]);
    pages = await servePages({ "/": "<!doctype html><title>another site</title><p>hello</p>" });
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    await pages?.close();
  });

  it.each([
    ["another port of the same host (same-site)", () => pages.url, "same-site"],
    ["another host (cross-site)", () => pages.url.replace("127.0.0.1", "localhost"), "cross-site"],
  ])("a page on %s cannot enqueue or replace resources with no-cors Blob posts", async (_, pageOrigin, site) => {
    const store = await startStore();
    const page = await openPage(browser, `${pageOrigin()}/`);
    try {
      await noCorsBlobPosts(page, store.url);
    } finally {
      await page.close();
    }
    expect(await stored(store)).toEqual({ rollouts: 0, latest: null });
    const posts = store.seen.filter((r) => r.method === "POST");
    // The requests arrived as a page sends them: its origin, marked by the browser, no Content-Type.
    expect(posts.map((r) => r.path)).toEqual(["/v1/agl/queues/rollouts/enqueue", "/v1/agl/resources"]);
    for (const r of posts) expect(r).toMatchObject({ origin: pageOrigin(), site, contentType: null, status: 403 });
  });

  it("a page on an origin given in corsOrigins writes with JSON; its Blob without a type is still a 415", async () => {
    const store = await startStore({ corsOrigins: [pages.url] });
    const page = await openPage(browser, `${pages.url}/`);
    try {
      const answer = await page.evaluate(async (base) => {
        const res = await fetch(`${base}/v1/agl/queues/rollouts/enqueue`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ rollouts: [{ input: { from: "an allowed page" } }] }),
        });
        return { status: res.status, body: await res.json() };
      }, store.url);
      expect(answer.status).toBe(201);
      expect(answer.body[0]).toMatchObject({ input: { from: "an allowed page" }, status: "queuing" });
      await noCorsBlobPosts(page, store.url);
    } finally {
      await page.close();
    }
    expect(store.seen.filter((r) => r.method === "POST").map((r) => r.status)).toEqual([201, 415, 415]);
    expect(await stored(store)).toEqual({ rollouts: 1, latest: null });
  });

  /**
   * A page at `http://attacker.example:PORT`, whose requests reach the store at 127.0.0.1:PORT as same-origin
   * requests. In a real attack the page first comes from the attacker's public address; Chromium alone
   * then refuses an insecure public page's requests to loopback (Private Network Access), other browsers do
   * not. The page here comes from loopback, so the store's own defence is what is tested.
   */
  async function reboundPage(store: Store): Promise<Page> {
    const page = await browser.newPage();
    await page.goto(`http://${REBOUND}:${store.port}${ATTACK_PAGE}`);
    return page;
  }

  /** Same-origin requests of the rebound page: a read and a JSON write, their status and error type. */
  const readAndWrite = (page: Page) =>
    page.evaluate(async (body) => {
      const read = await fetch("/v1/agl/statistics");
      const write = await fetch("/v1/agl/resources", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      const type = async (r: Response) => ((await r.json()) as { error_type?: string }).error_type ?? null;
      return { read: [read.status, await type(read)], write: [write.status, await type(write)] };
    }, TEMPLATE);

  it("a page whose name rebinds to 127.0.0.1 gets 403 naming --allowed-host, and is answered once its name is allowed", async () => {
    const store = await startStore();
    const page = await reboundPage(store);
    try {
      expect(await readAndWrite(page)).toEqual({ read: [403, "HostNotAllowed"], write: [403, "HostNotAllowed"] });
    } finally {
      await page.close();
    }
    const api = store.seen.filter((r) => r.path.startsWith("/v1/agl/"));
    // Same-origin to the browser: a POST's Origin names the server's own Host (Sec-Fetch-* goes to secure origins only).
    expect(api.map((r) => [r.path, r.host, r.origin])).toEqual([
      ["/v1/agl/statistics", `${REBOUND}:${store.port}`, null],
      ["/v1/agl/resources", `${REBOUND}:${store.port}`, `http://${REBOUND}:${store.port}`],
    ]);
    expect(await stored(store)).toEqual({ rollouts: 0, latest: null });
    // fetch() would drop a Host header; undici's request sends it.
    const refused = await request(`${store.url}/v1/agl/statistics`, { headers: { host: `${REBOUND}:${store.port}` } });
    expect(refused.statusCode).toBe(403);
    expect(((await refused.body.json()) as { detail: string }).detail).toContain(`--allowed-host ${REBOUND}`);

    const allowing = await startStore({ allowedHosts: [REBOUND] });
    const allowedPage = await reboundPage(allowing);
    try {
      expect(await readAndWrite(allowedPage)).toEqual({ read: [200, null], write: [201, null] });
    } finally {
      await allowedPage.close();
    }
    expect(((await stored(allowing)).latest as { resources: unknown }).resources).toEqual(TEMPLATE);
  });
});
