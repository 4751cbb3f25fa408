// `agl proxy --config FILE`: arguments, bad configs (non-zero exit naming the field), a run in process
// recording spans in a store file, and the command as a process under Node, Deno and Bun.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { runCli } from "../../src/cli/agl.ts";
import { parseProxyArgs, startLlmProxy } from "../../src/cli/proxy.ts";
import type { ServerHost } from "../../src/server/run.ts";
import { openStore } from "../../src/store/libsql/open.ts";
import { chatAnswer, chatChunk, type ScriptedUpstream, startScriptedUpstream } from "../proxy/scripted-upstream.ts";
import { startServerProcess } from "../server/processes.ts";
import { RUNTIMES } from "../runtimes.ts";

const dir = mkdtempSync(join(tmpdir(), "agl-proxy-"));
let upstream: ScriptedUpstream;

const host = (env: Record<string, string> = {}): ServerHost => ({
  runtime: "test",
  onShutdownSignal: () => undefined,
  cwd: () => ".",
  env: (n) => env[n],
  exit: () => process.exit(1),
});

function configFile(name: string, value: unknown): string {
  const path = join(dir, name);
  writeFileSync(path, typeof value === "string" ? value : JSON.stringify(value));
  return path;
}

beforeAll(async () => {
  upstream = await startScriptedUpstream({ kind: "json", body: chatAnswer("from upstream") });
});
afterAll(async () => {
  await upstream.stop();
  rmSync(dir, { recursive: true, force: true });
});
afterEach(() => vi.restoreAllMocks());

describe("agl proxy arguments and config", () => {
  it("parses its flags and refuses bad ones", () => {
    expect(parseProxyArgs(["--config", "c.json", "--port", "0", "--host", "0.0.0.0", "--store", "memory"])).toEqual({
      config: "c.json",
      host: "0.0.0.0",
      port: 0,
      store: "memory",
      allowedHosts: null,
      help: false,
    });
    expect(() => parseProxyArgs([])).toThrow(/--config FILE is required/);
    expect(() => parseProxyArgs(["--config", "c", "--port", "x"])).toThrow(/--port/);
    expect(() => parseProxyArgs(["--config", "c", "--bogus"])).toThrow(/unknown option/);
  });

  it("exits non-zero with the error on a bad config", async () => {
    const errors: string[] = [];
    vi.spyOn(console, "error").mockImplementation((m: unknown) => void errors.push(String(m)));
    const run = (value: unknown) => runCli(["proxy", "--config", configFile("bad.json", value)], host());
    expect(await run({ models: [{ name: "m", upstreams: ["ftp://x"] }] })).toBe(1);
    expect(errors.at(-1)).toMatch(/models\.0\.upstreams\.0/);
    expect(await run({ models: [{ name: "m", upstreams: [upstream.url] }], colour: "blue" })).toBe(1);
    expect(errors.at(-1)).toMatch(/colour/);
    expect(await run("{ not json")).toBe(1);
    expect(errors.at(-1)).toMatch(/not valid JSON/);
    expect(await run({ models: [{ name: "m", upstreams: [upstream.url], api_key_env: "AGL_TEST_ABSENT_KEY" }] })).toBe(1);
    expect(errors.at(-1)).toMatch(/AGL_TEST_ABSENT_KEY/);
    expect(await run({ models: [{ name: "m", upstreams: [upstream.url] }], token: "AGL_TEST_ABSENT_TOKEN" })).toBe(1);
    expect(errors.at(-1)).toMatch(/AGL_TEST_ABSENT_TOKEN/);
    expect(await runCli(["proxy", "--config", join(dir, "missing.json")], host())).toBe(1);
    expect(await runCli(["proxy"], host())).toBe(2);
  });

  it("serves the config's models with its token and records routed calls in the store given", async () => {
    vi.spyOn(console, "log").mockImplementation(() => undefined);
    const db = join(dir, "spans.db");
    const before = await openStore(`file:${db}`);
    const { rollout_id: rid, attempt } = await before.startRollout({ q: 1 });
    await before.close();
    const config = configFile("ok.json", { models: [{ name: "m", upstreams: [upstream.url] }], token: "PROXY_TOKEN" });
    const running = await startLlmProxy(parseProxyArgs(["--config", config, "--port", "0", "--store", db]), host({ PROXY_TOKEN: "tok" }));
    try {
      const llm = running.proxy.asResource({ rolloutId: rid, attemptId: attempt.attempt_id });
      const c = new OpenAI({ baseURL: llm.endpoint, apiKey: "tok", maxRetries: 0 });
      const res = await c.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] });
      expect(res.choices[0].message.content).toBe("from upstream");
    } finally {
      await running.shutdown();
    }
    const store = await openStore(`file:${db}`);
    const spans = (await store.querySpans(rid)).items;
    await store.close();
    expect(spans.map((s) => [s.name, s.attempt_id, s.sequence_id, s.attributes["gen_ai.prompt.0.content"]])).toEqual([
      ["litellm_request", attempt.attempt_id, 1, "hi"],
    ]);
  });
});

describe.each(RUNTIMES)("agl proxy as a process under %s", (runtime) => {
  it("answers the openai and anthropic clients through the upstream and stops on SIGTERM", async () => {
    const anthropicModel = { name: "claude", api: "anthropic", upstreams: [upstream.url.replace(/\/v1$/, "")] };
    const config = configFile(`${runtime}.json`, { models: [{ name: "m", upstreams: [upstream.url] }, anthropicModel] });
    const proc = await startServerProcess(runtime, ["proxy", "--config", config, "--port", "0"], {}, / at (http:\/\/[^\s;]+)\/v1/);
    try {
      const c = new OpenAI({ baseURL: `${proc.url}/v1`, apiKey: "none", maxRetries: 0 });
      const res = await c.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hello" }] });
      expect(res.choices[0].message.content).toBe("from upstream");
      expect((await c.models.list()).data.map((m) => m.id)).toEqual(["m", "claude"]);
      upstream.script.push({
        kind: "sse",
        events: [
          chatChunk({ role: "assistant", content: "" }),
          chatChunk({ content: "stre" }),
          chatChunk({ content: "amed" }),
          chatChunk({}, "stop"),
        ],
      });
      let text = "";
      const stream = await c.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hello" }], stream: true });
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
      expect(text).toBe("streamed");

      upstream.script.push({
        kind: "sse",
        named: true,
        events: [
          {
            type: "message_start",
            message: {
              id: "msg_1",
              type: "message",
              role: "assistant",
              model: "claude",
              content: [],
              usage: { input_tokens: 1, output_tokens: 0 },
            },
          },
          { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
          { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "from claude" } },
          { type: "content_block_stop", index: 0 },
          { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 2 } },
          { type: "message_stop" },
        ],
      });
      const claude = new Anthropic({ baseURL: proc.url, apiKey: "none", maxRetries: 0 });
      const message = await claude.messages
        .stream({ model: "claude", max_tokens: 8, messages: [{ role: "user", content: "hello" }] })
        .finalMessage();
      expect(message.content).toEqual([{ type: "text", text: "from claude" }]);
    } finally {
      expect(await proc.stop("SIGTERM")).toBe(0);
    }
  }, 120_000);
});
