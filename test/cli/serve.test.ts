// `agl serve` on a tiny Hugging Face checkpoint with Qwen2.5's real tokenizer and chat template, through
// the official `openai` client: chat (plain and streamed), completions from text or ids, token ids,
// stop strings and ids, the context-length 400, the bearer token, tools rendered by the template, a
// tool-call round trip, and the command itself under Node, Deno and Bun.
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { runCli } from "../../src/cli/agl.ts";
import { parseServeArgs, startPolicyServer, type RunningPolicyServer } from "../../src/cli/serve.ts";
import { parseModelConfig, type ModelConfig } from "../../src/model/config.ts";
import { generate } from "../../src/model/generate.ts";
import { loadPeftAdapter, loadPretrained, saveHfModel, type PretrainedModel } from "../../src/model/hf/index.ts";
import { initParams } from "../../src/model/init.ts";
import type { Tokenizer, ToolDefinition } from "../../src/model/tokenizer-api.ts";
import { finishGeneration, type GenerationEngine } from "../../src/model/generation.ts";
import { ModelPolicy } from "../../src/proxy/policy.ts";
import { PolicyServer } from "../../src/proxy/policy-server.ts";
import type { ServerHost } from "../../src/server/run.ts";
import { QWEN_TOKENIZER_DIR } from "../model/hf/qwen-files.ts";
import { startServerProcess } from "../server/processes.ts";
import { RUNTIMES } from "../runtimes.ts";

const dir = mkdtempSync(join(tmpdir(), "agl-serve-"));
const CONFIG: ModelConfig = parseModelConfig({
  vocab_size: 151936,
  d_model: 16,
  n_layers: 2,
  n_heads: 4,
  n_kv_heads: 2,
  d_ff: 32,
  max_seq_len: 512,
  rope_theta: 1000000,
  norm_eps: 1e-6,
  tie_embeddings: true,
  qkv_bias: true,
});
const TOOLS: ToolDefinition[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Weather of a city",
      parameters: { type: "object", properties: { city: { type: "string" } } },
    },
  },
];
const host: ServerHost = {
  runtime: "test",
  onShutdownSignal: () => undefined,
  cwd: () => ".",
  env: () => undefined,
  exit: () => process.exit(1),
};

let model: PretrainedModel;
let server: RunningPolicyServer;
let client: OpenAI;

beforeAll(async () => {
  await saveHfModel(dir, { config: CONFIG, params: initParams(CONFIG, 7), dtype: "BF16", generation: { eosTokenIds: [151645, 151643] } });
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) copyFileSync(join(QWEN_TOKENIZER_DIR, f), join(dir, f));
  server = await startPolicyServer(
    { ...parseServeArgs(["--model", dir, "--port", "0", "--device", "cpu", "--name", "tiny-qwen"], () => undefined), token: "s3cret" },
    host,
  );
  model = server.model;
  client = new OpenAI({ baseURL: server.url, apiKey: "s3cret", maxRetries: 0 });
}, 60_000);

afterAll(async () => {
  await server?.shutdown();
  rmSync(dir, { recursive: true, force: true });
});

const tok = (): Tokenizer => model.tokenizer!;

describe("agl serve (in process) with the openai client", () => {
  it("answers a chat with the template's prompt ids and the model's greedy tokens", async () => {
    const messages = [{ role: "user" as const, content: "Hello!" }];
    const res = (await client.chat.completions.create({ model: "tiny-qwen", messages, max_tokens: 8, temperature: 0 })) as unknown as {
      prompt_token_ids: number[];
      choices: Array<{ message: { content: string }; token_ids: number[]; finish_reason: string }>;
    };
    const prompt = tok().applyChatTemplate(messages, { addGenerationPrompt: true });
    expect(res.prompt_token_ids).toEqual(prompt);
    const want = generate(model.config, model.weights, prompt, { maxTokens: 8, temperature: 0, stop: [151645, 151643] });
    expect(res.choices[0].token_ids).toEqual(want.tokens);
    expect(res.choices[0].message.content).toBe(tok().decode(want.tokens));
  });

  it("streams the same text, token ids included", async () => {
    const messages = [{ role: "user" as const, content: "Say something" }];
    const plain = (await client.chat.completions.create({ model: "tiny-qwen", messages, max_tokens: 10, temperature: 0 })) as unknown as {
      choices: Array<{ message: { content: string }; token_ids: number[] }>;
    };
    const stream = await client.chat.completions.create({ model: "tiny-qwen", messages, max_tokens: 10, temperature: 0, stream: true });
    let text = "";
    const ids: number[] = [];
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? "";
      ids.push(...((chunk.choices[0] as unknown as { token_ids?: number[] } | undefined)?.token_ids ?? []));
    }
    expect(text).toBe(plain.choices[0].message.content);
    expect(ids).toEqual(plain.choices[0].token_ids);
  });

  it("completes text prompts through the tokenizer, and token-id prompts as given", async () => {
    const a = (await client.completions.create({
      model: "tiny-qwen",
      prompt: "The capital of France is",
      max_tokens: 4,
      temperature: 0,
    })) as unknown as {
      prompt_token_ids: number[];
      choices: Array<{ text: string; token_ids: number[] }>;
    };
    expect(a.prompt_token_ids).toEqual(tok().encode("The capital of France is", { addSpecialTokens: true }));
    const b = (await client.completions.create({
      model: "tiny-qwen",
      prompt: a.prompt_token_ids,
      max_tokens: 4,
      temperature: 0,
    })) as unknown as typeof a;
    expect(b.choices[0].token_ids).toEqual(a.choices[0].token_ids);
    // nothing to generate is an empty answer (the HF tokenizer library refuses to decode no ids)
    const none = await client.completions.create({ model: "tiny-qwen", prompt: "Hi", max_tokens: 0 });
    expect(none.choices[0]).toMatchObject({ text: "", finish_reason: "length" });
  });

  it("stops on a stop id, keeping it, and cuts text at a stop string", async () => {
    const base = { model: "tiny-qwen", prompt: "one two three", max_tokens: 6, temperature: 0 };
    const free = (await client.completions.create(base)) as unknown as {
      choices: Array<{ text: string; token_ids: number[]; finish_reason: string }>;
    };
    const first = free.choices[0].token_ids[0];
    const byId = (await client.completions.create({ ...base, stop_token_ids: [first] } as never)) as unknown as typeof free;
    expect(byId.choices[0].token_ids).toEqual([first]);
    expect(byId.choices[0].finish_reason).toBe("stop");
    const text = free.choices[0].text;
    const needle = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 1);
    if (needle.trim() !== "") {
      const byText = (await client.completions.create({ ...base, stop: [needle] })) as unknown as typeof free;
      expect(byText.choices[0].text).toBe(text.slice(0, text.indexOf(needle)));
      expect(byText.choices[0].finish_reason).toBe("stop");
    }
  });

  it("refuses a request beyond the context with a 400 naming the limit, and a wrong token with a 401", async () => {
    const e = await client.chat.completions
      .create({ model: "tiny-qwen", messages: [{ role: "user", content: "hi" }], max_tokens: 600 })
      .catch((err: unknown) => err);
    expect(e).toBeInstanceOf(OpenAI.BadRequestError);
    expect((e as Error).message).toMatch(/maximum context length is 512 tokens/);
    const intruder = new OpenAI({ baseURL: server.url, apiKey: "wrong", maxRetries: 0 });
    await expect(intruder.models.list()).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
    const list = await client.models.list();
    expect(list.data.map((m) => m.id)).toEqual(["tiny-qwen"]);
  });

  it("renders offered tools into the prompt with the model's chat template", async () => {
    const messages = [{ role: "user" as const, content: "Weather in Paris?" }];
    const res = (await client.chat.completions.create({
      model: "tiny-qwen",
      messages,
      tools: TOOLS,
      max_tokens: 2,
      temperature: 0,
    })) as unknown as {
      prompt_token_ids: number[];
    };
    expect(res.prompt_token_ids).toEqual(tok().applyChatTemplate(messages, { addGenerationPrompt: true, tools: TOOLS }));
    expect(tok().decode(res.prompt_token_ids)).toContain('"name": "get_weather"');
  });
});

describe("a tool-call round trip", () => {
  // A random tiny model never writes a tool call by itself: this policy's engine answers with fixed
  // token ids (the tokenizer's encoding of a Qwen tool call), so the parsing, the HTTP shapes and the
  // template rendering of the call and its result are what is tested here, with the real tokenizer.
  it("parses the model's <tool_call> into tool_calls and renders the call and its result in the next prompt", async () => {
    const callText = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
    const prompts: number[][] = [];
    const engine: GenerationEngine = {
      backend: "cpu",
      async generate(_config, _params, requests, tokenizer) {
        return requests.map((r) => {
          prompts.push(r.prompt);
          const ids = [...tokenizer!.encode(callText), 151645];
          return finishGeneration(
            ids,
            ids.map(() => -0.5),
            "stop",
            r.stop,
            tokenizer,
          );
        });
      },
    };
    const policy = new ModelPolicy({ model: "scripted", config: model.config, params: model.weights, tokenizer: tok(), engine });
    const ps = new PolicyServer({ policy });
    await ps.start();
    try {
      const c = new OpenAI({ baseURL: ps.endpoint, apiKey: "x", maxRetries: 0 });
      const user = { role: "user" as const, content: "Weather in Paris?" };
      const first = await c.chat.completions.create({ model: "scripted", messages: [user], tools: TOOLS });
      const choice = first.choices[0];
      expect(choice.finish_reason).toBe("tool_calls");
      expect(choice.message.content).toBeNull();
      expect(choice.message.tool_calls).toHaveLength(1);
      const call = choice.message.tool_calls![0] as { id: string; function: { name: string; arguments: string } };
      expect(call.id).toMatch(/^call_/);
      expect(call.function.name).toBe("get_weather");
      expect(JSON.parse(call.function.arguments)).toEqual({ city: "Paris" });

      const streamed = await c.chat.completions.create({ model: "scripted", messages: [user], tools: TOOLS, stream: true });
      const deltas: unknown[] = [];
      let finish: string | null = null;
      for await (const chunk of streamed) {
        if (chunk.choices[0]?.delta?.tool_calls) deltas.push(...chunk.choices[0].delta.tool_calls);
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      expect(deltas).toMatchObject([{ index: 0, type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }]);
      expect(finish).toBe("tool_calls");

      // Without tools offered, the same text is plain content.
      const plain = await c.chat.completions.create({ model: "scripted", messages: [user] });
      expect(plain.choices[0].message.content).toBe(callText);

      const followUp = [user, choice.message, { role: "tool" as const, tool_call_id: call.id, content: "18C, sunny" }];
      await c.chat.completions.create({ model: "scripted", messages: followUp as never, tools: TOOLS });
      const last = prompts[prompts.length - 1];
      const rendered = tok().decode(last, { skipSpecialTokens: false });
      expect(rendered).toContain(
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>',
      );
      expect(rendered).toContain("<|im_start|>user\n<tool_response>\n18C, sunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
    } finally {
      await ps.stop();
    }
  });
});

describe.each(RUNTIMES)("agl serve as a process under %s", (runtime) => {
  it("loads the folder, answers the openai client with token ids and stops on SIGTERM", async () => {
    const proc = await startServerProcess(
      runtime,
      ["serve", "--model", dir, "--port", "0", "--device", "cpu"],
      {},
      / at (http:\/\/[^\s;]+)\/v1/,
    );
    try {
      const c = new OpenAI({ baseURL: `${proc.url}/v1`, apiKey: "none", maxRetries: 0 });
      const name = dir.split("/").pop()!;
      const res = (await c.chat.completions.create({
        model: name,
        messages: [{ role: "user", content: "Hello!" }],
        max_tokens: 5,
        temperature: 0,
      })) as unknown as {
        choices: Array<{ token_ids: number[] }>;
      };
      const prompt = tok().applyChatTemplate([{ role: "user", content: "Hello!" }], { addGenerationPrompt: true });
      expect(res.choices[0].token_ids).toEqual(
        generate(model.config, model.weights, prompt, { maxTokens: 5, temperature: 0, stop: [151645, 151643] }).tokens,
      );
    } finally {
      expect(await proc.stop("SIGTERM")).toBe(0);
    }
  }, 120_000);
});

describe("agl serve arguments", () => {
  it("refuses bad flags with a usage error", () => {
    expect(() => parseServeArgs([], () => undefined)).toThrow(/--model DIR is required/);
    expect(() => parseServeArgs(["--model", "x", "--device", "tpu"], () => undefined)).toThrow(/--device/);
    expect(() => parseServeArgs(["--model", "x", "--port", "-1"], () => undefined)).toThrow(/--port/);
    expect(() => parseServeArgs(["--model", "x", "--bogus"], () => undefined)).toThrow(/--bogus/);
    expect(parseServeArgs(["--model", "x"], (n) => (n === "AGL_SERVE_TOKEN" ? "t" : undefined)).token).toBe("t");
    expect(() => parseServeArgs(["--model", "x", "--port", "65536"], () => undefined)).toThrow(
      /--port must be an integer from 0 to 65535 \(got "65536"\)/,
    );
    expect(() => parseServeArgs(["--model", "x", "--max-batch", ""], () => undefined)).toThrow(/--max-batch/);
    expect(() => parseServeArgs(["--model", "x", "--token", " "], () => undefined)).toThrow(/--token must not be empty/);
  });

  it("through the command line: --help is exit 0 with the usage, a bad flag exit 2 with the reason and the usage", async () => {
    const out: string[] = [];
    const err: string[] = [];
    const log = vi.spyOn(console, "log").mockImplementation((m: unknown) => void out.push(String(m)));
    const error = vi.spyOn(console, "error").mockImplementation((m: unknown) => void err.push(String(m)));
    try {
      expect(await runCli(["serve", "--help"], host)).toBe(0);
      expect(out.join("\n")).toContain("Usage: agl serve --model DIR");
      expect(await runCli(["serve", "--model", dir, "--device", "tpu"], host)).toBe(2);
      expect(err.join("\n")).toMatch(/agl serve: --device must be cpu, webgpu or auto[\s\S]*Usage: agl serve/);
      expect(await runCli(["serve", "--model", join(dir, "absent")], host)).toBe(1); // not a usage error: the folder is missing
      expect(err[err.length - 1]).toMatch(/^agl serve: .*absent/);
    } finally {
      log.mockRestore();
      error.mockRestore();
    }
  });

  it("a folder without a tokenizer is refused with its name", async () => {
    await expect(
      startPolicyServer(
        parseServeArgs(["--model", "test/fixtures/hf/qwen2-bias-tied", "--port", "0", "--device", "cpu"], () => undefined),
        host,
      ),
    ).rejects.toThrow(/no tokenizer\.json/);
  });
});

describe("agl serve --adapter", () => {
  it("serves the base with a PEFT adapter merged: the adapted model's greedy tokens", async () => {
    const { copyFileSync: copy, mkdtempSync: mk } = await import("node:fs");
    const base = "test/fixtures/hf/qwen3-qknorm-headdim";
    const folder = mk(join(tmpdir(), "agl-serve-lora-"));
    for (const f of ["config.json", "generation_config.json", "model.safetensors"]) copy(join(base, f), join(folder, f));
    for (const f of ["tokenizer.json", "tokenizer_config.json"]) copy(join(QWEN_TOKENIZER_DIR, f), join(folder, f));
    const running = await startPolicyServer(
      parseServeArgs(
        ["--model", folder, "--adapter", `${base}-lora`, "--port", "0", "--device", "cpu", "--name", "adapted"],
        () => undefined,
      ),
      host,
    );
    try {
      const tiny = await loadPretrained(base);
      const adapter = await loadPeftAdapter(`${base}-lora`, tiny.config);
      const prompt = [3, 9, 27, 81];
      const c = new OpenAI({ baseURL: running.url, apiKey: "x", maxRetries: 0 });
      const res = (await c.completions.create({
        model: "adapted",
        prompt,
        max_tokens: 6,
        temperature: 0,
        stop_token_ids: [],
      } as never)) as unknown as {
        choices: Array<{ token_ids: number[] }>;
      };
      const want = generate(tiny.config, tiny.weights, prompt, { maxTokens: 6, temperature: 0, stop: [], lora: adapter });
      const plain = generate(tiny.config, tiny.weights, prompt, { maxTokens: 6, temperature: 0, stop: [] });
      expect(res.choices[0].token_ids).toEqual(want.tokens);
      expect(want.tokens).not.toEqual(plain.tokens);
    } finally {
      await running.shutdown();
      rmSync(folder, { recursive: true, force: true });
    }
  });
});
