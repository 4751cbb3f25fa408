/**
 * A refusal answered before the route reads the body (a wrong token, a cross-site write) reaches a client
 * that sends its body slowly and reads the answer afterwards (src/server/drain-refused.ts): on Node and
 * Deno the connection was reset instead (a broken pipe where the 401 or 403 should be).
 */
import { serve } from "@hono/node-server";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LLMProxy } from "../../src/proxy/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { startServerProcess, type ServerProcess } from "./processes.ts";
import { RUNTIMES } from "../runtimes.ts";
import { slowPost } from "./slow-post.ts";

const ENQUEUE = "/v1/agl/queues/rollouts/enqueue";
const BODY = JSON.stringify({ rollouts: [{ input: "x".repeat(200_000) }] });
const statusOf = (answer: string) => answer.slice(0, answer.indexOf("\r\n"));

describe.each(RUNTIMES)("refusals with a slow body under %s", (runtime) => {
  let withToken: ServerProcess;
  let tokenless: ServerProcess;
  beforeAll(async () => {
    [withToken, tokenless] = await Promise.all([
      startServerProcess(runtime, ["--port", "0", "--db", "memory"], { AGL_STORE_TOKEN: "s3cret" }),
      startServerProcess(runtime, ["--port", "0", "--db", "memory"]),
    ]);
  }, 60_000);
  afterAll(async () => {
    await Promise.all([withToken?.stop(), tokenless?.stop()]);
  });

  it("a wrong token: 401", async () => {
    const answer = await slowPost(withToken.url, ENQUEUE, { authorization: "Bearer wrong" }, BODY, 1_200);
    expect(statusOf(answer)).toBe("HTTP/1.1 401 Unauthorized");
    expect(answer).toContain('"error_type":"Unauthorized"');
  });

  it("a write from another site: 403, nothing stored", async () => {
    const answer = await slowPost(tokenless.url, ENQUEUE, { origin: "http://evil.example" }, BODY, 1_200);
    expect(statusOf(answer)).toBe("HTTP/1.1 403 Forbidden");
    expect(answer).toContain('"error_type":"CrossSiteRequest"');
    const stats = (await (await fetch(`${tokenless.url}/v1/agl/statistics`)).json()) as { total_rollouts: number };
    expect(stats.total_rollouts).toBe(0);
  });
});

describe("the LLM proxy", () => {
  it("a write from another site with a slow body: 403", async () => {
    const proxy = new LLMProxy({ models: [{ name: "m", upstreams: ["http://127.0.0.1:9"] }], store: new InMemoryLightningStore() });
    const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
      const s = serve({ fetch: proxy.app().fetch, hostname: "127.0.0.1", port: 0 }, () => resolve(s));
    });
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const answer = await slowPost(url, "/v1/chat/completions", { origin: "http://evil.example" }, BODY, 1_200);
      expect(statusOf(answer)).toBe("HTTP/1.1 403 Forbidden");
    } finally {
      server.close();
    }
  });
});
