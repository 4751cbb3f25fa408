// `agl serve` as a newcomer meets it: streamed chunks carry the log-probs asked for (each chunk its own
// tokens', adding up to the non-streamed answer's), alternatives beyond the server's limit are a 400
// naming the field and the limit, a completion's `logprobs: 0` gives the sampled tokens' log-probs, and
// the startup line says which model name clients must send.
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseServeArgs, type RunningPolicyServer, startPolicyServer } from "../../src/cli/serve.ts";
import { parseModelConfig } from "../../src/model/config.ts";
import { saveHfModel } from "../../src/model/hf/index.ts";
import { initParams } from "../../src/model/init.ts";
import { MAX_TOP_LOGPROBS } from "../../src/proxy/policy-server.ts";
import type { ServerHost } from "../../src/server/run.ts";
import { QWEN_TOKENIZER_DIR } from "../model/hf/qwen-files.ts";
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

type ChatLogprobs = { content: { token: string; logprob: number; top_logprobs: unknown[] }[] } | null;
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

  it("refuses more alternatives than it serves with a 400 naming the field and the limit", async () => {
    const chat = client.chat.completions.create({
      model: "tiny",
      messages: [{ role: "user", content: "Hi" }],
      max_tokens: 2,
      logprobs: true,
      top_logprobs: 2,
    });
    await expect(chat).rejects.toMatchObject({ status: 400, param: "top_logprobs" });
    await expect(chat).rejects.toThrow(`top_logprobs must be at most ${MAX_TOP_LOGPROBS}`);
    const completion = client.completions.create({ model: "tiny", prompt: "Hi", max_tokens: 2, logprobs: 3 });
    await expect(completion).rejects.toMatchObject({ status: 400, param: "logprobs" });
    await expect(completion).rejects.toThrow(`logprobs must be at most ${MAX_TOP_LOGPROBS}`);
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
