// `agl serve` as a newcomer meets it: streamed chunks carry the log-probs asked for (each chunk its own
// tokens', adding up to the non-streamed answer's), `top_logprobs` (a completion's `logprobs: N`) gives
// the likeliest alternatives of each token, bad requests for them are a 400 naming the field, a
// completion's `logprobs: 0` gives the sampled tokens' log-probs, and the startup line says which model
// name clients must send.
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseServeArgs, type RunningPolicyServer, startPolicyServer } from "../../src/cli/serve.ts";
import { parseModelConfig } from "../../src/model/config.ts";
import { saveHfModel } from "../../src/model/hf/index.ts";
import { initParams } from "../../src/model/init.ts";
import type { ServerHost } from "../../src/server/run.ts";
import { QWEN_TOKENIZER_DIR } from "../model/hf/qwen-files.ts";
import { parsePrometheusText, sampleValue } from "../metrics/prometheus-text.ts";
import { startServerProcess } from "../server/processes.ts";

const root = mkdtempSync(join(tmpdir(), "agl-serve-logprobs-"));
const dir = join(root, "tiny-qwen-folder");
const host: ServerHost = {
  runtime: "test",
  onShutdownSignal: () => undefined,
  cwd: () => ".",
  env: () => undefined,
  exit: () => process.exit(1),
};
let server: RunningPolicyServer;
let client: OpenAI;

beforeAll(async () => {
  mkdirSync(dir);
  const config = parseModelConfig({
    vocab_size: 151936,
    d_model: 16,
    n_layers: 2,
    n_heads: 4,
    n_kv_heads: 2,
    d_ff: 32,
    max_seq_len: 256,
    rope_theta: 1000000,
    norm_eps: 1e-6,
    tie_embeddings: true,
    qkv_bias: true,
  });
  await saveHfModel(dir, { config, params: initParams(config, 3), dtype: "BF16", generation: { eosTokenIds: [151645, 151643] } });
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) copyFileSync(join(QWEN_TOKENIZER_DIR, f), join(dir, f));
  server = await startPolicyServer(
    parseServeArgs(["--model", dir, "--port", "0", "--device", "cpu", "--name", "tiny"], () => undefined),
    host,
  );
  client = new OpenAI({ baseURL: server.url, apiKey: "none", maxRetries: 0 });
}, 60_000);
afterAll(async () => {
  await server?.shutdown();
  rmSync(root, { recursive: true, force: true });
});

type Alternative = { token: string; logprob: number; bytes: number[] };
type ChatLogprobs = { content: { token: string; logprob: number; bytes: number[]; top_logprobs: Alternative[] }[] } | null;
type CompletionLogprobs = { tokens: string[]; token_logprobs: number[]; top_logprobs: Record<string, number>[] } | null;

describe("log-probs from agl serve", () => {
  it("streams a chat's log-probs, each chunk its own tokens', as the plain answer has them", async () => {
    const ask = { model: "tiny", messages: [{ role: "user" as const, content: "Count" }], max_tokens: 12, temperature: 0, logprobs: true };
    const plain = (await client.chat.completions.create(ask)) as unknown as {
      choices: { token_ids: number[]; logprobs: ChatLogprobs }[];
    };
    const stream = await client.chat.completions.create({ ...ask, stream: true });
    const streamed: number[] = [];
    for await (const chunk of stream) {
      const c = chunk.choices[0] as unknown as { token_ids: number[]; logprobs: ChatLogprobs } | undefined;
      if (!c || c.token_ids.length === 0) continue;
      expect(c.logprobs?.content).toHaveLength(c.token_ids.length);
      streamed.push(...c.logprobs!.content.map((e) => e.logprob));
    }
    expect(streamed).toHaveLength(plain.choices[0].token_ids.length);
    expect(streamed).toEqual(plain.choices[0].logprobs!.content.map((e) => e.logprob));
  });

  it("streams a completion's log-probs with logprobs: 0, as the plain answer has them", async () => {
    const ask = { model: "tiny", prompt: "one two", max_tokens: 10, temperature: 0, logprobs: 0 };
    const plain = (await client.completions.create(ask)) as unknown as { choices: { token_ids: number[]; logprobs: CompletionLogprobs }[] };
    const lp = plain.choices[0].logprobs!;
    expect(lp.token_logprobs).toHaveLength(plain.choices[0].token_ids.length);
    expect(lp.top_logprobs).toEqual(lp.tokens.map((t, i) => ({ [t]: lp.token_logprobs[i] })));
    const streamed: number[] = [];
    for await (const chunk of await client.completions.create({ ...ask, stream: true })) {
      const c = chunk.choices[0] as unknown as { token_ids: number[]; logprobs: CompletionLogprobs };
      if (c.token_ids.length === 0) continue;
      expect(c.logprobs?.tokens).toHaveLength(c.token_ids.length);
      streamed.push(...c.logprobs!.token_logprobs);
    }
    expect(streamed).toEqual(lp.token_logprobs);
  });

  it("gives the likeliest alternatives of each chat token, streamed as answered, likeliest first", async () => {
    const ask = {
      model: "tiny",
      messages: [{ role: "user" as const, content: "Count" }],
      max_tokens: 8,
      logprobs: true,
      top_logprobs: 4,
      seed: 3,
    };
    const greedy = (await client.chat.completions.create({ ...ask, temperature: 0 })) as unknown as {
      choices: { token_ids: number[]; logprobs: ChatLogprobs }[];
    };
    const content = greedy.choices[0].logprobs!.content;
    expect(content).toHaveLength(greedy.choices[0].token_ids.length);
    for (const c of content) {
      expect(c.top_logprobs).toHaveLength(4);
      const lps = c.top_logprobs.map((a) => a.logprob);
      expect(lps).toEqual([...lps].sort((a, b) => b - a));
      expect(lps.reduce((a, lp) => a + Math.exp(lp), 0)).toBeLessThanOrEqual(1 + 1e-6);
      // greedy: the token itself is the likeliest alternative
      expect(c.top_logprobs[0]).toEqual({ token: c.token, logprob: c.logprob, bytes: c.bytes });
      for (const a of c.top_logprobs) expect(a.bytes).toEqual([...new TextEncoder().encode(a.token)]);
    }
    const sampled = (await client.chat.completions.create({ ...ask, temperature: 1 })) as unknown as typeof greedy;
    const streamed: ChatLogprobs[] = [];
    for await (const chunk of await client.chat.completions.create({ ...ask, temperature: 1, stream: true })) {
      const c = chunk.choices[0] as unknown as { token_ids: number[]; logprobs: ChatLogprobs } | undefined;
      if (c && c.token_ids.length > 0) streamed.push(c.logprobs);
    }
    expect(streamed.flatMap((l) => l!.content)).toEqual(sampled.choices[0].logprobs!.content);
  });

  it("gives a completion's N likeliest alternatives and the sampled token in each top_logprobs entry", async () => {
    const ask = { model: "tiny", prompt: "Hi", max_tokens: 6, logprobs: 3, temperature: 1, seed: 5 };
    const lp = ((await client.completions.create(ask)) as unknown as { choices: { logprobs: CompletionLogprobs }[] }).choices[0].logprobs!;
    expect(lp.top_logprobs).toHaveLength(lp.tokens.length);
    lp.top_logprobs.forEach((top, i) => {
      expect(top[lp.tokens[i]]).toBe(lp.token_logprobs[i]);
      const n = Object.keys(top).length;
      expect(n).toBeGreaterThanOrEqual(3);
      expect(n).toBeLessThanOrEqual(4);
    });
  });

  it("refuses alternatives without logprobs, or more than the API allows, with a 400 naming the field", async () => {
    const base = { model: "tiny", messages: [{ role: "user" as const, content: "Hi" }], max_tokens: 2 };
    const alone = client.chat.completions.create({ ...base, top_logprobs: 2 });
    await expect(alone).rejects.toMatchObject({ status: 400, param: "top_logprobs" });
    await expect(alone).rejects.toThrow("top_logprobs needs logprobs: true");
    await expect(client.chat.completions.create({ ...base, logprobs: true, top_logprobs: 21 })).rejects.toMatchObject({
      status: 400,
      param: "top_logprobs",
    });
    await expect(client.completions.create({ model: "tiny", prompt: "Hi", max_tokens: 2, logprobs: 6 })).rejects.toMatchObject({
      status: 400,
      param: "logprobs",
    });
  });

  it("serves /metrics: the requests answered above by endpoint and status, and the tokens they took", async () => {
    const families = parsePrometheusText(await (await fetch(new URL("/metrics", server.url))).text());
    expect(sampleValue(families, "agl_policy_requests_total", { endpoint: "chat", status: "200" })).toBeGreaterThanOrEqual(2);
    expect(sampleValue(families, "agl_policy_requests_total", { endpoint: "chat", status: "400" })).toBeGreaterThanOrEqual(1);
    expect(sampleValue(families, "agl_policy_requests_total", { endpoint: "completions", status: "400" })).toBeGreaterThanOrEqual(1);
    expect(sampleValue(families, "agl_policy_generation_tokens_total", { endpoint: "chat" })).toBeGreaterThan(0);
    expect(sampleValue(families, "agl_policy_version")).toBe(0);
  });
});

describe("agl serve's startup line", () => {
  it("says which model name clients send", async () => {
    const proc = await startServerProcess(
      "node",
      ["serve", "--model", dir, "--port", "0", "--device", "cpu"],
      {},
      / at (http:\/\/[^\s;]+)\/v1/,
    );
    try {
      expect(proc.output()).toContain(`clients send "model": "tiny-qwen-folder" (the folder's name; --name NAME gives another)`);
    } finally {
      await proc.stop("SIGTERM");
    }
  }, 120_000);
});
