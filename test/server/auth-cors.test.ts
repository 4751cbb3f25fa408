/**
 * The bearer token and CORS, safely: an empty token is refused (flag, environment, file, library),
 * the token can come from a file, 401s carry a `WWW-Authenticate: Bearer` challenge, and `*` never
 * lets an arbitrary origin (or `null`) call with credentials.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { parseStoreArgs } from "../../src/cli/store.ts";
import { UsageError } from "../../src/server/config.ts";
import { Hono } from "hono";
import { installOpenAiBasics } from "../../src/proxy/openai-http.ts";
import { createStoreApp, type StoreAppOptions } from "../../src/server/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { ValidationError } from "../../src/types/index.ts";
import { startInProcess, type InProcessServer } from "./in-process.ts";
import { startServerProcess } from "./processes.ts";

const dir = mkdtempSync(join(tmpdir(), "agl-auth-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const file = (name: string, text: string): string => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};
const env = (vars: Record<string, string>) => (name: string) => vars[name];

describe("the token option", () => {
  it.each([
    [["--token", ""], {}, /--token is empty/],
    [["--token="], {}, /--token is empty/],
    [["--token", "  "], {}, /--token is empty/],
    [[], { AGL_STORE_TOKEN: "" }, /AGL_STORE_TOKEN is empty/],
    [["--token-file", file("empty", "\n")], {}, /token file .* is empty/],
    [[], { AGL_STORE_TOKEN_FILE: file("blank", "  \n") }, /token file .* is empty/],
    [["--token-file", join(dir, "missing")], {}, /--token-file: cannot read/],
    [["--token-file", ""], {}, /--token-file is empty/],
    [["--token", "a", "--token-file", file("t1", "b")], {}, /--token or --token-file, not both/],
    [[], { AGL_STORE_TOKEN: "a", AGL_STORE_TOKEN_FILE: file("t2", "b") }, /AGL_STORE_TOKEN or AGL_STORE_TOKEN_FILE, not both/],
  ])("refuses %j with env %j rather than serving without authentication", (argv, vars, message) => {
    expect(() => parseStoreArgs(argv, env(vars))).toThrow(UsageError);
    expect(() => parseStoreArgs(argv, env(vars))).toThrow(message);
  });

  it("reads the token from a file (trailing newline dropped) or from the environment; flags win", () => {
    const path = file("token", "s3cret-from-file\n");
    expect(parseStoreArgs(["--token-file", path])).toMatchObject({ token: "s3cret-from-file", tokenSource: "--token-file" });
    expect(parseStoreArgs([], env({ AGL_STORE_TOKEN_FILE: path }))).toMatchObject({
      token: "s3cret-from-file",
      tokenSource: "AGL_STORE_TOKEN_FILE",
    });
    expect(parseStoreArgs([], env({ AGL_STORE_TOKEN: "s3cret-env" }))).toMatchObject({
      token: "s3cret-env",
      tokenSource: "AGL_STORE_TOKEN",
    });
    expect(parseStoreArgs(["--token-file", path], env({ AGL_STORE_TOKEN: "" }))).toMatchObject({ token: "s3cret-from-file" });
    expect(parseStoreArgs([])).toMatchObject({ token: null, tokenSource: null });
  });

  it("createStoreApp refuses an empty token with a typed error", () => {
    const store = new InMemoryLightningStore();
    expect(() => createStoreApp(store, { token: "" })).toThrow(ValidationError);
    expect(() => createStoreApp(store, { token: " " })).toThrow(/token must not be empty/);
    expect(() => createStoreApp(store, { token: null })).not.toThrow();
  });

  it("refuses, at startup, a token that no Bearer header can carry (store, policy server and LLM proxy alike)", () => {
    const store = new InMemoryLightningStore();
    for (const token of ["two words", "p@ss!", "tok=en", "tökén"]) {
      expect(() => createStoreApp(store, { token }), token).toThrow(ValidationError);
      expect(() => installOpenAiBasics(new Hono(), { token }), token).toThrow(/token must be a bearer token \(RFC 6750\)/);
    }
    for (const token of ["s3cret-token", "a.b_c~d+e/f-9==", "0123456789abcdef"]) {
      expect(() => createStoreApp(store, { token }), token).not.toThrow();
      expect(() => installOpenAiBasics(new Hono(), { token }), token).not.toThrow();
    }
  });

  it("agl store exits 2 with a clear message on an empty token, and takes one from a file", async () => {
    const err = await startServerProcess("node", ["--port", "0", "--db", "memory", "--token", ""]).then(
      async (started) => {
        await started.stop();
        return null;
      },
      (e: unknown) => e as Error,
    );
    expect(err?.message).toMatch(/exited with 2/);
    expect(err?.message).toContain("--token is empty");

    const server = await startServerProcess("node", ["--port", "0", "--db", "memory"], {
      AGL_STORE_TOKEN_FILE: file("served", "file-token\n"),
    });
    try {
      expect(server.output()).toContain("bearer token required (from AGL_STORE_TOKEN_FILE)");
      expect((await fetch(`${server.url}/v1/agl/statistics`)).status).toBe(401);
      expect((await fetch(`${server.url}/v1/agl/statistics`, { headers: { authorization: "Bearer file-token" } })).status).toBe(200);
    } finally {
      await server.stop();
    }
  });
});

let store: InMemoryLightningStore;
let server: InProcessServer;
async function start(options: StoreAppOptions): Promise<void> {
  store = new InMemoryLightningStore();
  server = await startInProcess(store, options);
}
afterEach(async () => {
  await server?.close();
  await store?.close();
});

describe("401 answers", () => {
  it('carry WWW-Authenticate: Bearer, with error="invalid_token" only when a wrong token was given', async () => {
    await start({ token: "right" });
    const missing = await fetch(`${server.url}/v1/agl/statistics`);
    expect(missing.status).toBe(401);
    expect(missing.headers.get("www-authenticate")).toMatch(/^Bearer\b/);
    expect(missing.headers.get("www-authenticate")).not.toContain("error=");
    expect(await missing.json()).toMatchObject({ error_type: "Unauthorized" });

    // Another scheme, or no token after `Bearer`: the plain challenge, as for no header.
    for (const authorization of ["Basic cmlnaHQ=", "Bearer", "Bearer right extra"]) {
      const malformed = await fetch(`${server.url}/v1/agl/statistics`, { headers: { authorization } });
      expect(malformed.status, authorization).toBe(401);
      expect(malformed.headers.get("www-authenticate"), authorization).toBe('Bearer realm="agl"');
      expect(await malformed.json()).toMatchObject({ error_type: "Unauthorized" });
    }

    const wrong = await fetch(`${server.url}/v1/agl/rollouts`, { method: "POST", headers: { authorization: "Bearer wrong" }, body: "{}" });
    expect(wrong.status).toBe(401);
    expect(wrong.headers.get("www-authenticate")).toMatch(/^Bearer\b.*error="invalid_token"/);
    expect(await wrong.json()).toMatchObject({ error_type: "Unauthorized", detail: "Invalid bearer token" });

    const ok = await fetch(`${server.url}/v1/agl/statistics`, { headers: { authorization: "Bearer right" } });
    expect(ok.status).toBe(200);
    expect(ok.headers.get("www-authenticate")).toBeNull();
  });

  it("a browser on an allowed origin can read the challenge (exposed) and the CORS headers are on the 401", async () => {
    await start({ token: "right", corsOrigins: ["http://app.example"] });
    const res = await fetch(`${server.url}/v1/agl/statistics`, { headers: { origin: "http://app.example" } });
    expect(res.status).toBe(401);
    expect(res.headers.get("access-control-allow-origin")).toBe("http://app.example");
    expect(res.headers.get("access-control-expose-headers")?.toLowerCase()).toContain("www-authenticate");
  });
});

describe("CORS", () => {
  const preflight = (origin: string) =>
    fetch(`${server.url}/v1/agl/rollouts`, {
      method: "OPTIONS",
      headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": "authorization,content-type" },
    });

  it("'*' answers '*' to any origin and null, never with credentials", async () => {
    await start({ corsOrigins: ["http://app.example", "*"] });
    for (const origin of ["http://evil.example", "null", "http://app.example"]) {
      const res = await fetch(`${server.url}/v1/agl/health`, { headers: { origin } });
      expect(res.headers.get("access-control-allow-origin"), origin).toBe("*");
      expect(res.headers.get("access-control-allow-credentials"), origin).toBeNull();
      const pre = await preflight(origin);
      expect(pre.status).toBeLessThan(300);
      expect(pre.headers.get("access-control-allow-origin")).toBe("*");
      expect(pre.headers.get("access-control-allow-credentials")).toBeNull();
      // A token set by the page's code still goes through: the header is allowed by name.
      expect(pre.headers.get("access-control-allow-headers")?.toLowerCase()).toContain("authorization");
    }
  });

  it("a list echoes only its origins (with credentials); null only when listed", async () => {
    await start({ corsOrigins: ["http://app.example"] });
    for (const origin of ["null", "http://evil.example", "http://app.example.evil.example"]) {
      const res = await fetch(`${server.url}/v1/agl/health`, { headers: { origin } });
      expect(res.headers.get("access-control-allow-origin"), origin).toBeNull();
      expect((await preflight(origin)).headers.get("access-control-allow-origin"), origin).toBeNull();
    }
    const ok = await fetch(`${server.url}/v1/agl/health`, { headers: { origin: "http://app.example" } });
    expect(ok.headers.get("access-control-allow-origin")).toBe("http://app.example");
    expect(ok.headers.get("access-control-allow-credentials")).toBe("true");
    expect(ok.headers.get("vary")?.toLowerCase()).toContain("origin");
    await server.close();
    await store.close();

    await start({ corsOrigins: ["null", "http://app.example"] });
    const listedNull = await fetch(`${server.url}/v1/agl/health`, { headers: { origin: "null" } });
    expect(listedNull.headers.get("access-control-allow-origin")).toBe("null");
  });

  it("a preflight answers 200 OK as upstream's does, and 400 JSON when the origin is not allowed", async () => {
    await start({ corsOrigins: ["http://app.example"], token: "secret" });
    const ok = await preflight("http://app.example");
    expect([ok.status, await ok.text()]).toEqual([200, "OK"]);
    expect(ok.headers.get("access-control-allow-origin")).toBe("http://app.example");
    expect(ok.headers.get("access-control-allow-methods")).toContain("POST");
    const refused = await preflight("http://evil.example");
    expect(refused.status).toBe(400);
    expect(await refused.json()).toMatchObject({
      error_type: "CorsOriginNotAllowed",
      detail: expect.stringContaining("http://evil.example"),
    });
    expect(refused.headers.get("access-control-allow-origin")).toBeNull();
    await server.close();
    await store.close();
    // '*': every origin's preflight is answered.
    await start({ corsOrigins: ["*"] });
    expect((await preflight("http://evil.example")).status).toBe(200);
  });
});
