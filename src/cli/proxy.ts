/**
 * `agl proxy --config FILE`: the LLM proxy (src/proxy/llm-proxy.ts) in front of the configured
 * OpenAI-compatible upstreams, recording routed calls in a store. docs/llm-proxy.md.
 */
import { LightningStoreClient } from "../client/client.ts";
import { checkPortFree, platform } from "../platform/index.ts";
import { MissingEnvironmentVariableError, type LlmProxyConfig, parseLlmProxyConfigText } from "../proxy/llm-proxy-config.ts";
import { LLMProxy } from "../proxy/llm-proxy.ts";
import { platformServe } from "../proxy/openai-http.ts";
import { normaliseDb } from "../server/open-store.ts";
import type { ServerHost } from "../server/run.ts";
import { allowedHostFlag, type CommandSpec, formatHelp, parseAllowedHosts, parseFlags, portFlag } from "./flags.ts";
import type { LightningStore } from "../store/base.ts";
import { runnerFetch } from "../trainer/runner-fetch.ts";

export const PROXY_COMMAND = {
  usage: "agl proxy --config FILE [options]",
  about:
    "An OpenAI-compatible proxy (/v1/chat/completions, /v1/completions, /v1/models, also under\n" +
    "/rollout/{rid}/attempt/{aid}) in front of the models of a JSON config file; calls under the rollout prefix\n" +
    "are recorded as LLM-call spans in the store. The config: docs/llm-proxy.md#configuration.",
  sections: [
    {
      title: "Options:",
      flags: [
        { name: "config", type: "string", value: "FILE", required: true, help: "the JSON config (required)" },
        { name: "host", type: "string", value: "HOST", help: "interface to bind (default: the config's host, else 127.0.0.1)" },
        portFlag("port (default: the config's port, else 4000; 0 picks a free one)"),
        {
          name: "store",
          type: "string",
          value: "URL|PATH",
          help:
            "where spans go: an `agl store` server (http://...), memory, a libSQL URL or a file path\n" +
            "(default: the config's store; without one nothing is recorded)",
        },
        { ...allowedHostFlag, help: `${allowedHostFlag.help}\n(replaces the config's allowed_hosts)` },
      ],
    },
  ],
} as const satisfies CommandSpec;

export const PROXY_USAGE = formatHelp(PROXY_COMMAND);

export interface ProxyArgs {
  config: string;
  host: string | null;
  port: number | null;
  store: string | null;
  /** null: the config's. */
  allowedHosts: string[] | null;
  help: boolean;
}

export function parseProxyArgs(argv: readonly string[]): ProxyArgs {
  const { help, values: v } = parseFlags(PROXY_COMMAND, argv);
  return {
    config: v.config ?? "",
    host: v.host ?? null,
    port: v.port ?? null,
    store: v.store ?? null,
    allowedHosts: v["allowed-host"] === undefined ? null : parseAllowedHosts(v["allowed-host"]),
    help,
  };
}

/**
 * An `agl store` server for http(s) URLs; otherwise the library's store URL rule (memory, libSQL URL,
 * file path). A server that does not answer is one loud line, not a refusal: the proxy still relays
 * calls outside the rollout prefix, and the store may come up later.
 */
async function openProxyStore(where: string): Promise<LightningStore> {
  if (/^https?:\/\//i.test(where)) {
    const client = new LightningStoreClient(where);
    await client.checkHealth().catch((e: unknown) => {
      console.error(`[agl proxy] WARNING: ${(e as Error).message} Calls under /rollout/ fail until it answers.`);
    });
    return client;
  }
  const { openStore } = await import("../store/libsql/open.ts");
  return openStore(normaliseDb(where));
}

export interface RunningProxy {
  proxy: LLMProxy;
  config: LlmProxyConfig;
  stopped: Promise<void>;
  shutdown(): Promise<void>;
}

export async function startLlmProxy(args: ProxyArgs, host: ServerHost): Promise<RunningProxy> {
  const config = parseLlmProxyConfigText(platform.readTextFile(args.config), args.config);
  let token: string | null = null;
  if (config.token !== undefined) {
    token = host.env(config.token) ?? null;
    if (token === null || token === "") throw new MissingEnvironmentVariableError(config.token, "token");
  }
  const hostname = args.host ?? config.host;
  const port = args.port ?? config.port;
  await checkPortFree({ hostname, port, portSetting: "--port (or the config's port)" });
  const storeAt = args.store ?? config.store ?? null;
  const store = storeAt === null ? null : await openProxyStore(storeAt);
  const proxy = new LLMProxy({
    models: config.models,
    hostname,
    port,
    token,
    allowedHosts: args.allowedHosts ?? config.allowed_hosts,
    store,
    env: (n) => host.env(n),
    serve: platformServe,
    fetchWhole: runnerFetch(),
  });
  await proxy.start();
  const log = (m: string): void => console.log(`[agl proxy] ${m}`);
  log(
    `${proxy.modelNames.join(", ")} (${host.runtime}) at ${proxy.endpoint}${token ? "; bearer token required" : ""}; ` +
      (storeAt === null ? "no store: calls are not recorded" : `spans to ${storeAt.replace(/\/\/[^@/]*@/, "//")}`),
  );
  let resolveStopped!: () => void;
  const stopped = new Promise<void>((r) => (resolveStopped = r));
  let stopping: Promise<void> | null = null;
  const shutdown = (): Promise<void> => {
    stopping ??= proxy
      .stop()
      .then(() => store?.close())
      .finally(resolveStopped);
    return stopping;
  };
  host.onShutdownSignal((signal) => {
    if (stopping) host.exit(130);
    log(`${signal} received: stopping`);
    void shutdown();
  });
  return { proxy, config, stopped, shutdown };
}
