/**
 * What the three servers without a token refuse from web pages (src/server/browser-guard.ts), with the
 * headers a browser sends: a JSON body without a JSON Content-Type (415), writes marked cross-site by
 * `Origin` or `Sec-Fetch-Site` (403), and a `Host` that names neither loopback, an IP address, the bind
 * address nor an allowed name (403, against DNS rebinding). Each refusal leaves nothing written.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Hono } from "hono";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { parseAllowedHosts } from "../../src/cli/flags.ts";
import { parseProxyArgs, startLlmProxy } from "../../src/cli/proxy.ts";
import { parseServeArgs } from "../../src/cli/serve.ts";
import { parseStoreArgs } from "../../src/cli/store.ts";
import { createPolicyApp, LLMProxy, PolicyServer, parseLlmProxyConfig } from "../../src/proxy/index.ts";
import { isLoopbackAddress } from "../../src/server/browser-guard.ts";
import { createStoreApp } from "../../src/server/index.ts";
import { type ServerHost, startStoreServer } from "../../src/server/run.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { ClientServerExecutionStrategy } from "../../src/trainer/cs.ts";
import { ValidationError } from "../../src/types/index.ts";
import { routedStore, tinyPolicy } from "../proxy/routed-store.ts";
import { type ScriptedUpstream, startScriptedUpstream } from "../proxy/scripted-upstream.ts";
import { startServerProcess } from "./processes.ts";
import { RUNTIMES } from "../runtimes.ts";

/** Where the servers are taken to listen: what `Host` and a same-origin `Origin` say. */
const HOST = "127.0.0.1:4747";
const OWN_ORIGIN = `http://${HOST}`;

interface Access {
  token?: string;
  corsOrigins?: string[];
  allowedHosts?: string[];
  bindAddress?: string;
}

interface Made {
  /** A request to the server in process (`app.request`); writes go under the routing prefix where spans are recorded. */
  request(path: string, init: RequestInit): Promise<Response>;
  /** How many writes reached the store (or the upstream). */
  writes(): Promise<number>;
}

interface ServerKind {
  name: string;
  make(access: Access): Promise<Made>;
  write: { path: string; body: unknown; status: number };
  read: string;
  /** The error type and message of a refusal, from the server's own error shape. */
  error(body: unknown): { type: string; message: string };
}

const storeError = (b: unknown) => {
  const { error_type, detail } = b as { error_type: string; detail: string };
  return { type: error_type, message: detail };
};
const openAiError = (b: unknown) => {
  const { error } = b as { error: { type: string; message: string } };
  return { type: error.type, message: error.message };
};

const policy = tinyPolicy();
let upstream: ScriptedUpstream;
beforeAll(async () => {
  upstream = await startScriptedUpstream();
});
afterAll(() => upstream.stop());

/** What the `agl` commands get from their runtime, for starting them in this process. */
const TEST_HOST: ServerHost = {
  runtime: "test",
  onShutdownSignal: () => undefined,
  cwd: () => ".",
  env: () => undefined,
  exit: () => process.exit(1),
};

const CHAT = { model: "tiny-policy", messages: [{ role: "user", content: "hi" }], max_tokens: 2 };

const SERVERS: ServerKind[] = [
  {
    name: "store server",
    async make(access) {
      const store = new InMemoryLightningStore();
      const app = createStoreApp(store, access);
      return { request: async (path, init) => app.request(path, init), writes: async () => (await store.queryRollouts({})).items.length };
    },
    write: { path: "/v1/agl/queues/rollouts/enqueue", body: { rollouts: [{ input: { q: 1 } }] }, status: 201 },
    read: "/v1/agl/statistics",
    error: storeError,
  },
  {
    name: "policy server",
    async make(access) {
      const { store, prefix, spans } = await routedStore();
      const app = createPolicyApp({ policy, store, ...access });
      // Routed calls are recorded as spans: a refused one must leave none.
      return { request: routed(app, prefix), writes: spans };
    },
    write: { path: "/v1/chat/completions", body: CHAT, status: 200 },
    read: "/v1/models",
    error: openAiError,
  },
  {
    name: "LLM proxy",
    async make(access) {
      const { store, prefix, spans } = await routedStore();
      const seen = upstream.received.length;
      const proxy = new LLMProxy({
        models: [{ name: "tiny-policy", upstreams: [upstream.url] }],
        store,
        token: access.token,
        allowedHosts: access.allowedHosts,
        hostname: access.bindAddress,
      });
      return { request: routed(proxy.app(), prefix), writes: async () => upstream.received.length - seen + (await spans()) };
    },
    write: { path: "/v1/chat/completions", body: CHAT, status: 200 },
    read: "/v1/models",
    error: openAiError,
  },
];

/** `app.request`, with the chat route sent under the routing prefix `prefix`. */
const routed =
  (app: Hono, prefix: string) =>
  async (path: string, init: RequestInit): Promise<Response> =>
    app.request(path.startsWith("/v1/chat") ? `${prefix}${path}` : path, init);

function send(made: Made, kind: ServerKind, headers: Record<string, string>, method = "POST"): Promise<Response> {
  const json = method === "POST";
  return made.request(json ? kind.write.path : kind.read, {
    method,
    headers: { host: HOST, ...(json ? { "content-type": "application/json" } : {}), ...headers },
    ...(json ? { body: JSON.stringify(kind.write.body) } : {}),
  });
}

/** Header sets a browser sends with a write from a page that is not the server's own. */
const CROSS_SITE: [string, Record<string, string>][] = [
  ["a page on another port of the same host", { origin: "http://127.0.0.1:8080", "sec-fetch-site": "same-site" }],
  ["a page on another site", { origin: "http://evil.example", "sec-fetch-site": "cross-site" }],
  ["a sandboxed frame or file: page (Origin null)", { origin: "null", "sec-fetch-site": "cross-site" }],
  ["a request marked cross-site without Origin", { "sec-fetch-site": "cross-site" }],
  ["an insecure page (Origin only: no Sec-Fetch-* to http names)", { origin: "http://evil.example" }],
];

describe.each(SERVERS)("the $name without a token", (kind) => {
  it("refuses a body without a JSON Content-Type with a 415, as text/plain; application/json passes", async () => {
    const made = await kind.make({});
    // Bytes, as a page's Blob: a string body would get text/plain from the Request itself.
    const post = (contentType: string | null) => {
      const headers = new Headers({ host: HOST });
      if (contentType !== null) headers.set("content-type", contentType);
      const body = new TextEncoder().encode(JSON.stringify(kind.write.body));
      return made.request(kind.write.path, { method: "POST", headers, body });
    };
    expect(new Request("http://x/", { method: "POST", body: new Uint8Array(1) }).headers.get("content-type")).toBeNull();
    for (const type of [null, "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data"]) {
      const res = await post(type);
      expect(res.status, String(type)).toBe(415);
      expect(kind.error(await res.json()), String(type)).toMatchObject({
        type: "UnsupportedMediaType",
        message: expect.stringMatching(/application\/json/),
      });
    }
    expect(await made.writes()).toBe(0);
    expect((await post("application/json; charset=utf-8")).status).toBe(kind.write.status);
    expect(await made.writes()).toBeGreaterThan(0);
  });

  it.each(CROSS_SITE)("refuses a write from %s with a 403 that says to set a token", async (_, headers) => {
    const made = await kind.make({});
    const res = await send(made, kind, headers);
    expect(res.status).toBe(403);
    const { type, message } = kind.error(await res.json());
    expect(type).toBe("CrossSiteRequest");
    expect(message).toMatch(/Set a token/);
    if (kind.name === "store server") expect(message).toContain("--cors-origin");
    expect(await made.writes()).toBe(0);
  });

  it("takes writes from its own pages, from typed URLs and from clients that are not browsers; reads from anywhere", async () => {
    const made = await kind.make({});
    const own: Record<string, string>[] = [{ origin: OWN_ORIGIN, "sec-fetch-site": "same-origin" }, { "sec-fetch-site": "none" }, {}];
    for (const headers of own) expect((await send(made, kind, headers)).status, JSON.stringify(headers)).toBe(kind.write.status);
    for (const [, headers] of CROSS_SITE) expect((await send(made, kind, headers, "GET")).status).toBe(200);
  });

  it("answers loopback names and IP addresses in Host; another name is a 403 naming --allowed-host", async () => {
    const made = await kind.make({});
    for (const host of [
      "localhost:4747",
      "localhost",
      "app.localhost:4747",
      "127.0.0.1",
      "127.3.2.1:4747",
      "[::1]:4747",
      "192.168.1.20:4747",
    ])
      expect((await send(made, kind, { host }, "GET")).status, host).toBe(200);
    for (const host of ["attacker.example", "attacker.example:4747", "localhost.attacker.example", "127.0.0.1.nip.io:4747"]) {
      for (const method of ["GET", "POST"]) {
        const res = await send(made, kind, { host, origin: `http://${host}` }, method);
        expect(res.status, `${method} ${host}`).toBe(403);
        const { type, message } = kind.error(await res.json());
        expect(type).toBe("HostNotAllowed");
        expect(message).toContain(`--allowed-host ${host.replace(/:\d+$/, "")}`);
      }
    }
    expect(await made.writes()).toBe(0);
  });

  it("answers the names given in allowedHosts: a name, a domain with its subdomains, or any name with *", async () => {
    const named = await kind.make({ allowedHosts: ["attacker.example", ".lab.example"] });
    for (const host of ["attacker.example:4747", "ATTACKER.example", "lab.example", "gpu1.lab.example:4747"]) {
      expect((await send(named, kind, { host, origin: `http://${host}` })).status, host).toBe(kind.write.status);
    }
    expect((await send(named, kind, { host: "other.example" }, "GET")).status).toBe(403);
    const any = await kind.make({ allowedHosts: ["*"] });
    expect((await send(any, kind, { host: "other.example" }, "GET")).status).toBe(200);
  });

  it("bound beyond loopback, checks Host only against names it is given", async () => {
    const open = await kind.make({ bindAddress: "0.0.0.0" });
    expect((await send(open, kind, { host: "gpu-box.lan:4747" }, "GET")).status).toBe(200);
    const listed = await kind.make({ bindAddress: "0.0.0.0", allowedHosts: ["gpu-box.lan"] });
    expect((await send(listed, kind, { host: "gpu-box.lan:4747" }, "GET")).status).toBe(200);
    expect((await send(listed, kind, { host: "attacker.example" }, "GET")).status).toBe(403);
    const boundByName = await kind.make({ bindAddress: "gpu-box.lan" });
    expect((await send(boundByName, kind, { host: "gpu-box.lan:4747" }, "GET")).status).toBe(200);
    // Cross-site writes are refused whatever the address.
    expect((await send(open, kind, { host: "gpu-box.lan:4747", origin: "http://evil.example" })).status).toBe(403);
  });

  it("with a token, takes cross-site writes and any Host that bring it, unless allowedHosts is given", async () => {
    const made = await kind.make({ token: "t0k" });
    const auth = { authorization: "Bearer t0k" };
    for (const [, headers] of CROSS_SITE) expect((await send(made, kind, { ...auth, ...headers })).status).toBe(kind.write.status);
    expect((await send(made, kind, { ...auth, host: "attacker.example" }, "GET")).status).toBe(200);
    // Without the token, the answer is the 401.
    expect((await send(made, kind, { origin: "http://evil.example" })).status).toBe(401);
    const listed = await kind.make({ token: "t0k", allowedHosts: ["app.example"] });
    expect((await send(listed, kind, { ...auth, host: "attacker.example" }, "GET")).status).toBe(403);
    expect((await send(listed, kind, { ...auth, host: "app.example" }, "GET")).status).toBe(200);
  });
});

describe("the store server's CORS origins", () => {
  const store = SERVERS[0]!;

  it("take writes from the origins listed (a page on another port included); others are still refused", async () => {
    const made = await store.make({ corsOrigins: ["http://127.0.0.1:8080", "https://app.example"] });
    const from = (origin: string, site: string) => send(made, store, { origin, "sec-fetch-site": site });
    expect((await from("http://127.0.0.1:8080", "same-site")).status).toBe(201);
    expect((await from("https://app.example", "cross-site")).status).toBe(201);
    expect((await from("http://127.0.0.1:8081", "same-site")).status).toBe(403);
    expect((await from("null", "cross-site")).status).toBe(403);
    expect(await made.writes()).toBe(2);
  });

  it("'*' takes writes from any origin: the user's explicit choice", async () => {
    const made = await store.make({ corsOrigins: ["*"] });
    expect((await send(made, store, { origin: "http://evil.example", "sec-fetch-site": "cross-site" })).status).toBe(201);
  });

  it("an OPTIONS preflight is not a write", async () => {
    const made = await store.make({ corsOrigins: ["http://127.0.0.1:8080"] });
    const res = await send(
      made,
      store,
      { origin: "http://127.0.0.1:8080", "sec-fetch-site": "same-site", "access-control-request-method": "POST" },
      "OPTIONS",
    );
    expect(res.status).toBeLessThan(300);
    expect(res.headers.get("access-control-allow-origin")).toBe("http://127.0.0.1:8080");
  });
});

describe("allowed hosts as options", () => {
  it("are names: a port, a scheme, a path or an empty name is refused naming the option", () => {
    const store = new InMemoryLightningStore();
    for (const bad of ["", " ", "example.com:8080", "http://example.com", "example.com/x", "."]) {
      expect(() => createStoreApp(store, { allowedHosts: [bad] }), bad).toThrow(ValidationError);
      expect(() => parseAllowedHosts([bad]), bad).toThrow(/--allowed-host must be a host name/);
    }
    expect(parseAllowedHosts(["Example.COM", " .Lab.example ", "*", "::1", "[::1]"])).toEqual([
      "example.com",
      ".lab.example",
      "*",
      "[::1]",
      "[::1]",
    ]);
    expect(() => parseLlmProxyConfig({ models: [{ name: "m", upstreams: ["http://x/v1"] }], allowed_hosts: ["a:1"] })).toThrow(
      /allowed_hosts\.0/,
    );
  });

  it("come from --allowed-host (repeatable) in agl store, agl serve and agl proxy, and from the proxy config", () => {
    const flags = ["--allowed-host", "a.example", "--allowed-host=.b.example"];
    expect(parseStoreArgs(flags).allowedHosts).toEqual(["a.example", ".b.example"]);
    expect(parseStoreArgs([]).allowedHosts).toEqual([]);
    expect(parseServeArgs(["--model", "m", ...flags], () => undefined).allowedHosts).toEqual(["a.example", ".b.example"]);
    expect(parseProxyArgs(["--config", "c", ...flags]).allowedHosts).toEqual(["a.example", ".b.example"]);
    expect(parseProxyArgs(["--config", "c"]).allowedHosts).toBeNull();
    expect(() => parseStoreArgs(["--allowed-host", "a.example:80"])).toThrow(/--allowed-host/);
    const config = parseLlmProxyConfig({ models: [{ name: "m", upstreams: ["http://x/v1"] }], allowed_hosts: ["Proxy.example"] });
    expect(config.allowed_hosts).toEqual(["proxy.example"]);
  });

  it("loopback bind addresses are told from the others", () => {
    for (const a of ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"]) expect(isLoopbackAddress(a), a).toBe(true);
    for (const a of ["0.0.0.0", "::", "192.168.1.2", "gpu-box.lan", "10.0.0.1"]) expect(isLoopbackAddress(a), a).toBe(false);
  });
});

describe("the servers pass their address and allowed names on", () => {
  /** The status of `GET path` with `Host: host` (fetch() would drop a Host header; undici's request sends it). */
  const statusFor = async (url: string, host: string): Promise<number> => {
    const res = await request(url, { headers: { host } });
    await res.body.dump();
    return res.statusCode;
  };

  it("PolicyServer: its allowedHosts", async () => {
    const server = new PolicyServer({ policy, allowedHosts: ["app.example"] });
    await server.start();
    try {
      expect(await statusFor(`${server.endpoint}/models`, "app.example")).toBe(200);
      expect(await statusFor(`${server.endpoint}/models`, "other.example")).toBe(403);
    } finally {
      await server.stop();
    }
  });

  it("agl proxy: the config's allowed_hosts, replaced by --allowed-host", async () => {
    const dir = mkdtempSync(join(tmpdir(), "agl-guard-"));
    const config = join(dir, "proxy.json");
    writeFileSync(config, JSON.stringify({ models: [{ name: "m", upstreams: [upstream.url] }], allowed_hosts: ["from-config.example"] }));
    const spy = vi.spyOn(console, "log").mockImplementation(() => undefined);
    try {
      for (const [flags, allowed, refused] of [
        [[], "from-config.example", "from-flag.example"],
        [["--allowed-host", "from-flag.example"], "from-flag.example", "from-config.example"],
      ] as const) {
        const running = await startLlmProxy(parseProxyArgs(["--config", config, "--port", "0", ...flags]), TEST_HOST);
        try {
          expect(await statusFor(`${running.proxy.endpoint}/models`, allowed)).toBe(200);
          expect(await statusFor(`${running.proxy.endpoint}/models`, refused)).toBe(403);
        } finally {
          await running.shutdown();
        }
      }
    } finally {
      spy.mockRestore();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("the Trainer's client-server strategy", () => {
  it("serves its store with the Host check of the address it binds: on 0.0.0.0 any name reaches it", async () => {
    const strategy = new ClientServerExecutionStrategy({ role: "algorithm", serverHost: "0.0.0.0", serverPort: 0 });
    let answer: number | null = null;
    await strategy.execute(
      async () => {
        const res = await request(`http://127.0.0.1:${strategy.boundPort}/v1/agl/statistics`, { headers: { host: "gpu-box.lan" } });
        answer = res.statusCode;
        await res.body.dump();
      },
      async () => undefined,
      new InMemoryLightningStore(),
    );
    expect(answer).toBe(200);
  });
});

describe("agl store's startup", () => {
  it("warns when it listens beyond loopback without a token, not on loopback or with a token", async () => {
    const warningsOf = async (argv: string[]) => {
      const warnings: string[] = [];
      const log = { debug() {}, info() {}, error() {}, warning: (m: string) => void warnings.push(m) };
      const spy = vi.spyOn(console, "log").mockImplementation(() => undefined);
      try {
        const running = await startStoreServer(parseStoreArgs(["--port", "0", "--db", "memory", ...argv]), TEST_HOST, log);
        await running.shutdown();
      } finally {
        spy.mockRestore();
      }
      return warnings.filter((w) => w.includes("without a token"));
    };
    expect(await warningsOf(["--host", "0.0.0.0"])).toEqual([
      expect.stringMatching(/listening on 0\.0\.0\.0 without a token.*--allowed-host/),
    ]);
    expect(await warningsOf([])).toEqual([]);
    expect(await warningsOf(["--host", "0.0.0.0", "--token", "t0k"])).toEqual([]);
  });
});

describe.each(RUNTIMES)("agl store as a process under %s", (runtime) => {
  it("answers Host attacker.example with 403 naming --allowed-host, and with 200 once --allowed-host attacker.example is given", async () => {
    // fetch() would drop a Host header; undici's request sends it.
    const statistics = async (url: string) => {
      const res = await request(`${url}/v1/agl/statistics`, { headers: { host: "attacker.example" } });
      return { status: res.statusCode, body: (await res.body.json()) as { detail?: string } };
    };
    const plain = await startServerProcess(runtime, ["--port", "0", "--db", "memory"]);
    try {
      const refused = await statistics(plain.url);
      expect(refused.status).toBe(403);
      expect(refused.body.detail).toContain("--allowed-host attacker.example");
      // The runtime's server hands the browser's headers through: cross-site writes and untyped bodies are refused.
      const enqueue = (headers: Record<string, string>) =>
        request(`${plain.url}/v1/agl/queues/rollouts/enqueue`, { method: "POST", headers, body: '{"rollouts":[{"input":1}]}' });
      const crossSite = await enqueue({
        "content-type": "application/json",
        origin: "http://evil.example",
        "sec-fetch-site": "cross-site",
      });
      expect([crossSite.statusCode, ((await crossSite.body.json()) as { error_type: string }).error_type]).toEqual([
        403,
        "CrossSiteRequest",
      ]);
      const untyped = await enqueue({ origin: plain.url, "sec-fetch-site": "same-origin" });
      expect([untyped.statusCode, ((await untyped.body.json()) as { error_type: string }).error_type]).toEqual([
        415,
        "UnsupportedMediaType",
      ]);
      const rollouts = (await (await fetch(`${plain.url}/v1/agl/rollouts`)).json()) as { items: unknown[] };
      expect(rollouts.items).toEqual([]);
    } finally {
      await plain.stop();
    }
    const allowing = await startServerProcess(runtime, ["--port", "0", "--db", "memory", "--allowed-host", "attacker.example"]);
    try {
      expect((await statistics(allowing.url)).status).toBe(200);
    } finally {
      await allowing.stop();
    }
  }, 60_000);
});
