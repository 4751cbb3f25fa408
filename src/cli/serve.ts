/**
 * `agl serve --model DIR`: a Hugging Face model folder (or one of our checkpoints exported with
 * `exportHf`) served by the OpenAI-compatible policy server on the CPU or WebGPU engine. docs/serving.md.
 */
import { loadPeftAdapter, loadPretrained, mergeLora, type PretrainedModel } from "../model/hf/index.ts";
import { createGenerationEngine } from "../proxy/engine.ts";
import { ModelPolicy } from "../proxy/policy.ts";
import { platformServe } from "../proxy/openai-http.ts";
import { PolicyServer } from "../proxy/policy-server.ts";
import type { ServerHost } from "../server/run.ts";
import { UsageError } from "../server/config.ts";

export const SERVE_DEFAULT_PORT = 8000;

export const SERVE_USAGE = `Usage: agl serve --model DIR [options]

Serves a Hugging Face model folder (Llama, Qwen2, Qwen3: config.json, safetensors, tokenizer.json) with an
OpenAI-compatible API: /v1/chat/completions, /v1/completions, /v1/models (token ids and log-probs included).

Options:
  --model DIR          the model folder (required)
  --adapter DIR        a LoRA adapter in PEFT's layout (adapter_config.json + adapter_model.safetensors), merged into the model
  --name NAME          the model name clients send (default: the folder's name)
  --host HOST          interface to bind (default 127.0.0.1)
  --port PORT          port (default ${SERVE_DEFAULT_PORT}; 0 picks a free one)
  --device DEVICE      cpu | webgpu | auto (default auto: WebGPU on a hardware adapter, else the CPU)
  --max-batch N        most sequences decoded together on the GPU (default 64)
  --gpu-weights F      f32 | bf16 | f16: how weight matrices are stored on the GPU (default f32; 16 bits halve the memory)
  --max-seq-len N      cap the context length (default: the model's max_position_embeddings)
  --token TOKEN        require "Authorization: Bearer TOKEN" (also AGL_SERVE_TOKEN)
  -h, --help           this text
`;

export interface ServeConfig {
  model: string;
  adapter: string | null;
  name: string | null;
  host: string;
  port: number;
  device: "cpu" | "webgpu" | "auto";
  maxBatch: number;
  gpuWeights: "f32" | "bf16" | "f16";
  maxSeqLen: number | null;
  token: string | null;
  help: boolean;
}

/** An integer flag value from `min` to `max`, else a UsageError naming the flag. */
export function positiveInt(flag: string, v: string | undefined, min = 1, max = Number.MAX_SAFE_INTEGER): number {
  const n = Number(v);
  if (v === undefined || v.trim() === "" || !Number.isInteger(n) || n < min || n > max)
    throw new UsageError(
      `${flag} needs an integer ${max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `from ${min} to ${max}`}, got ${JSON.stringify(v ?? null)}`,
    );
  return n;
}

export function parseServeArgs(argv: readonly string[], env: (name: string) => string | undefined): ServeConfig {
  const c: ServeConfig = {
    model: "",
    adapter: null,
    name: null,
    host: "127.0.0.1",
    port: SERVE_DEFAULT_PORT,
    device: "auto",
    maxBatch: 64,
    gpuWeights: "f32",
    maxSeqLen: null,
    token: env("AGL_SERVE_TOKEN") ?? null,
    help: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = (): string => {
      const v = argv[++i];
      if (v === undefined) throw new UsageError(`${flag} needs a value`);
      return v;
    };
    if (flag === "-h" || flag === "--help") c.help = true;
    else if (flag === "--model") c.model = value();
    else if (flag === "--adapter") c.adapter = value();
    else if (flag === "--name") c.name = value();
    else if (flag === "--host") c.host = value();
    else if (flag === "--port") c.port = positiveInt(flag, value(), 0, 65535);
    else if (flag === "--max-batch") c.maxBatch = positiveInt(flag, value());
    else if (flag === "--max-seq-len") c.maxSeqLen = positiveInt(flag, value(), 2);
    else if (flag === "--token") c.token = value();
    else if (flag === "--gpu-weights") {
      const f = value();
      if (f !== "f32" && f !== "bf16" && f !== "f16")
        throw new UsageError(`--gpu-weights must be f32, bf16 or f16, got ${JSON.stringify(f)}`);
      c.gpuWeights = f;
    } else if (flag === "--device") {
      const d = value();
      if (d !== "cpu" && d !== "webgpu" && d !== "auto")
        throw new UsageError(`--device must be cpu, webgpu or auto, got ${JSON.stringify(d)}`);
      c.device = d;
    } else throw new UsageError(`unknown option ${JSON.stringify(flag)}`);
  }
  if (!c.help && c.model === "") throw new UsageError("--model DIR is required");
  if (c.token !== null && c.token.trim() === "") throw new UsageError("--token must not be empty");
  return c;
}

export interface RunningPolicyServer {
  url: string;
  model: PretrainedModel;
  backend: "cpu" | "webgpu";
  stopped: Promise<void>;
  shutdown(): Promise<void>;
}

export async function startPolicyServer(config: ServeConfig, host: ServerHost): Promise<RunningPolicyServer> {
  const model = await loadPretrained(config.model, { maxSeqLen: config.maxSeqLen ?? undefined, name: config.name ?? undefined });
  if (model.tokenizer === null) throw new UsageError(`${config.model} has no tokenizer.json: serving needs the model's tokenizer`);
  if (config.adapter !== null) model.weights = mergeLora(model.config, model.weights, await loadPeftAdapter(config.adapter, model.config));
  const log = (m: string): void => console.log(`[agl serve] ${m}`);
  const engine = await createGenerationEngine({ backend: config.device, log, weightFormat: config.gpuWeights, maxBatch: config.maxBatch });
  const policy = new ModelPolicy({ model: model.name, config: model.config, params: model.weights, tokenizer: model.tokenizer, engine });
  const server = new PolicyServer({ policy, hostname: config.host, port: config.port, token: config.token, serve: platformServe });
  await server.start();
  const url = server.endpoint;
  console.log(
    `[agl serve] ${model.name} (${model.architecture}, ${model.config.n_layers} layers, context ${model.config.max_seq_len}) on ${engine.backend} (${host.runtime}) at ${url}${config.token ? "; bearer token required" : ""}`,
  );
  let resolveStopped!: () => void;
  const stopped = new Promise<void>((r) => (resolveStopped = r));
  let stopping: Promise<void> | null = null;
  const shutdown = (): Promise<void> => {
    stopping ??= server.stop().finally(() => {
      engine.close?.();
      resolveStopped();
    });
    return stopping;
  };
  host.onShutdownSignal((signal) => {
    if (stopping) host.exit(130);
    log(`${signal} received: stopping`);
    void shutdown();
  });
  return { url, model, backend: engine.backend, stopped, shutdown };
}
