/**
 * `agl serve --model DIR`: a Hugging Face model folder (or one of our checkpoints exported with
 * `exportHf`) served by the OpenAI-compatible policy server on the CPU or WebGPU engine. docs/serving.md.
 */
import { loadPeftAdapter, loadPretrained, mergeLora, type PretrainedModel } from "../model/hf/index.ts";
import { createGenerationEngine } from "../engine/factory.ts";
import { ModelPolicy } from "../proxy/policy.ts";
import { platformServe } from "../proxy/openai-http.ts";
import { PolicyServer } from "../proxy/policy-server.ts";
import { checkPortFree } from "../platform/index.ts";
import type { ServerHost } from "../server/run.ts";
import { UsageError } from "../server/config.ts";
import { allowedHostFlag, type CommandSpec, formatHelp, parseAllowedHosts, parseFlags, portFlag } from "./flags.ts";

export const SERVE_DEFAULT_PORT = 8000;

export const SERVE_COMMAND = {
  usage: "agl serve --model DIR [options]",
  about:
    "Serves a Hugging Face model folder (Llama, Qwen2, Qwen3: config.json, safetensors, tokenizer.json) with an\n" +
    "OpenAI-compatible API: /v1/chat/completions, /v1/completions, /v1/models (token ids and log-probs included).",
  sections: [
    {
      title: "Options:",
      flags: [
        { name: "model", type: "string", value: "DIR", required: true, help: "the model folder (required)" },
        {
          name: "adapter",
          type: "string",
          value: "DIR",
          help: "a LoRA adapter in PEFT's layout (adapter_config.json + adapter_model.safetensors), merged into the model",
        },
        { name: "name", type: "string", value: "NAME", help: "the model name clients send (default: the folder's name)" },
        { name: "host", type: "string", value: "HOST", help: "interface to bind (default 127.0.0.1)" },
        portFlag(`port (default ${SERVE_DEFAULT_PORT}; 0 picks a free one)`),
        {
          name: "device",
          type: "string",
          choices: ["cpu", "webgpu", "auto"],
          value: "DEVICE",
          help: "cpu | webgpu | auto (default auto: WebGPU on a hardware adapter, else the CPU)",
        },
        {
          name: "max-batch",
          type: "number",
          integer: true,
          min: 1,
          value: "N",
          help: "most sequences decoded together on the GPU (default 64)",
        },
        {
          name: "gpu-weights",
          type: "string",
          choices: ["f32", "bf16", "f16"],
          value: "F",
          help: "f32 | bf16 | f16: how weight matrices are stored on the GPU (default f32; 16 bits halve the memory)",
        },
        {
          name: "max-seq-len",
          type: "number",
          integer: true,
          min: 2,
          value: "N",
          help: "cap the context length (default: the model's max_position_embeddings)",
        },
        { name: "token", type: "string", value: "TOKEN", help: 'require "Authorization: Bearer TOKEN"', env: "AGL_SERVE_TOKEN" },
        allowedHostFlag,
      ],
    },
  ],
} as const satisfies CommandSpec;

export const SERVE_USAGE = formatHelp(SERVE_COMMAND);

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
  allowedHosts: string[];
  help: boolean;
}

export function parseServeArgs(argv: readonly string[], env: (name: string) => string | undefined): ServeConfig {
  const { help, values: v } = parseFlags(SERVE_COMMAND, argv);
  const c: ServeConfig = {
    model: v.model ?? "",
    adapter: v.adapter ?? null,
    name: v.name ?? null,
    host: v.host ?? "127.0.0.1",
    port: v.port ?? SERVE_DEFAULT_PORT,
    device: v.device ?? "auto",
    maxBatch: v["max-batch"] ?? 64,
    gpuWeights: v["gpu-weights"] ?? "f32",
    maxSeqLen: v["max-seq-len"] ?? null,
    token: v.token ?? env("AGL_SERVE_TOKEN") ?? null,
    allowedHosts: parseAllowedHosts(v["allowed-host"]),
    help,
  };
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
  await checkPortFree({ hostname: config.host, port: config.port, portSetting: "--port" });
  const model = await loadPretrained(config.model, { maxSeqLen: config.maxSeqLen ?? undefined, name: config.name ?? undefined });
  if (model.tokenizer === null) throw new UsageError(`${config.model} has no tokenizer.json: serving needs the model's tokenizer`);
  if (config.adapter !== null) model.weights = mergeLora(model.config, model.weights, await loadPeftAdapter(config.adapter, model.config));
  const log = (m: string): void => console.log(`[agl serve] ${m}`);
  const engine = await createGenerationEngine({ backend: config.device, log, weightFormat: config.gpuWeights, maxBatch: config.maxBatch });
  const policy = new ModelPolicy({ model: model.name, config: model.config, params: model.weights, tokenizer: model.tokenizer, engine });
  const server = new PolicyServer({
    policy,
    hostname: config.host,
    port: config.port,
    token: config.token,
    allowedHosts: config.allowedHosts,
    serve: platformServe,
  });
  await server.start();
  const url = server.endpoint;
  // The name clients must send as "model" (anything else is a 404), said where they look first.
  const named = config.name === null ? " (the folder's name; --name NAME gives another)" : "";
  console.log(
    `[agl serve] ${model.name} (${model.architecture}, ${model.config.n_layers} layers, context ${model.config.max_seq_len}) on ${engine.backend} (${host.runtime}) at ${url}; clients send "model": "${model.name}"${named}${config.token ? "; bearer token required" : ""}`,
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
