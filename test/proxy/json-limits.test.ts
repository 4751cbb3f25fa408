/**
 * The policy server and the LLM proxy read JSON bodies as the store server does (src/server/json-body.ts):
 * an object with more than MAX_JSON_KEYS keys or nesting deeper than MAX_JSON_DEPTH is a 400 in OpenAI's
 * error shape that names the limit and where it was passed, found before the parse, and nothing is
 * generated, forwarded or recorded.
 */
import type { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPolicyApp, LLMProxy } from "../../src/proxy/index.ts";
import { MAX_JSON_KEYS } from "../../src/server/json-scan.ts";
import { MAX_JSON_DEPTH } from "../../src/store/owned.ts";
import { routedStore, tinyPolicy } from "./routed-store.ts";
import { type ScriptedUpstream, startScriptedUpstream } from "./scripted-upstream.ts";

const policy = tinyPolicy();
let upstream: ScriptedUpstream;
beforeAll(async () => {
  upstream = await startScriptedUpstream();
});
afterAll(() => upstream.stop());

/** A routed chat body whose `extra` field is `value` (JSON text). */
const chatWith = (value: string) => `{"model":"tiny-policy","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"extra":${value}}`;
const manyKeys = (n: number) => `{${Array.from({ length: n }, (_, i) => `"k${i}":${i}`).join(",")}}`;
const deep = (levels: number) => "[".repeat(levels) + "0" + "]".repeat(levels);

interface Server {
  name: string;
  /** The app, the routing prefix its spans are recorded under, and what reached the model or the upstream. */
  make(): Promise<{ app: Hono; prefix: string; effects(): Promise<number> }>;
}

const SERVERS: Server[] = [
  {
    name: "policy server",
    async make() {
      const { store, prefix, spans } = await routedStore();
      return { app: createPolicyApp({ policy, store }), prefix, effects: spans };
    },
  },
  {
    name: "LLM proxy",
    async make() {
      const { store, prefix, spans } = await routedStore();
      const seen = upstream.received.length;
      const proxy = new LLMProxy({ models: [{ name: "tiny-policy", upstreams: [upstream.url] }], store });
      return { app: proxy.app(), prefix, effects: async () => upstream.received.length - seen + (await spans()) };
    },
  },
];

describe.each(SERVERS)("the $name's JSON bodies", (server) => {
  const post = (app: Hono, path: string, body: string) =>
    app.request(path, { method: "POST", headers: { "content-type": "application/json" }, body });

  it.each([
    ["an object with more than MAX_JSON_KEYS keys", manyKeys(MAX_JSON_KEYS + 1), `more than ${MAX_JSON_KEYS} keys`],
    ["nesting deeper than MAX_JSON_DEPTH", deep(MAX_JSON_DEPTH), `more than ${MAX_JSON_DEPTH} levels`],
    ["nesting far deeper than MAX_JSON_DEPTH", deep(100_000), `more than ${MAX_JSON_DEPTH} levels`],
  ])("answers %s with a 400 that names the limit and the field, and does nothing", async (_, value, limit) => {
    const { app, prefix, effects } = await server.make();
    const res = await post(app, `${prefix}/v1/chat/completions`, chatWith(value));
    expect(res.status).toBe(400);
    const { error } = (await res.json()) as { error: { message: string; type: string; param: string | null } };
    expect(error.type).toBe("invalid_request_error");
    expect(error.message).toContain(limit);
    expect(error.param).toMatch(/^extra\b/);
    expect(await effects()).toBe(0);
  });

  it("takes a body at the limits", async () => {
    const { app, prefix, effects } = await server.make();
    const res = await post(app, `${prefix}/v1/chat/completions`, chatWith(`[${manyKeys(MAX_JSON_KEYS)},${deep(MAX_JSON_DEPTH - 3)}]`));
    expect(res.status).toBe(200);
    expect(await effects()).toBeGreaterThan(0);
  });
});
