/**
 * The LLM proxy's configuration (docs/llm-proxy.md#configuration): which model names it serves, the
 * base URLs behind each and the API they speak (OpenAI's or Anthropic's Messages API), the body fields added to every request, timeouts and retries.
 * A JSON file for `agl proxy --config`, or the same object given to `new LLMProxy`.
 */
import { z } from "zod";
import { parseAllowedHost } from "../server/browser-guard.ts";
import { LightningError, ValidationError } from "../types/errors.ts";

const baseUrl = z
  .string()
  .refine((s) => /^https?:\/\/[^/\s]+/.test(s), { message: "must be an http(s) base URL such as http://host:8000/v1" })
  .transform((s) => s.replace(/\/+$/, ""));

const allowedHost = z.string().transform((s, ctx) => {
  try {
    return parseAllowedHost(s);
  } catch (e) {
    ctx.addIssue({ code: "custom", message: e instanceof Error ? e.message : String(e) });
    return z.NEVER;
  }
});

export const ProxyModelEntry = z.strictObject({
  /** The name clients send as `model`. */
  name: z.string().min(1),
  /** Base URLs as a client of `api` takes them (OpenAI's end in `/v1`; Anthropic's need not), used in turn. */
  upstreams: z.array(baseUrl).min(1),
  /** The API the upstreams speak: `openai` (`/v1/chat/completions`, `/v1/completions`) or `anthropic` (`/v1/messages`). */
  api: z.enum(["openai", "anthropic"]).default("openai"),
  /** The environment variable holding the upstreams' API key (sent as `Authorization: Bearer`, or `x-api-key` to Anthropic). */
  api_key_env: z.string().min(1).optional(),
  /** Body fields set on every request to this model (they win over the client's), e.g. `return_token_ids: true`; `model` renames it upstream. */
  params: z.record(z.string(), z.unknown()).default({}),
  /** Seconds one attempt may take (for a stream: until the answer starts, then between two chunks). */
  timeout_s: z.number().positive().default(600),
  /** Further attempts after a 429, a 5xx, a connection error or a timeout, each on the next upstream. */
  max_retries: z.number().int().min(0).max(20).default(2),
});
export type ProxyModelEntry = z.infer<typeof ProxyModelEntry>;
export type ProxyModelEntryInput = z.input<typeof ProxyModelEntry>;

const uniqueNames = (models: { name: string }[], ctx: z.RefinementCtx): void => {
  const seen = new Set<string>();
  models.forEach((m, i) => {
    if (seen.has(m.name)) ctx.addIssue({ code: "custom", message: `model name '${m.name}' is listed twice`, path: [i, "name"] });
    seen.add(m.name);
  });
};

export const ProxyModelList = z.array(ProxyModelEntry).min(1).superRefine(uniqueNames);

export const LlmProxyConfig = z.strictObject({
  models: ProxyModelList,
  host: z.string().min(1).default("127.0.0.1"),
  port: z.number().int().min(0).max(65535).default(4000),
  /** The environment variable holding the proxy's own bearer token (clients must send it). */
  token: z.string().min(1).optional(),
  /** Where spans go: `memory`, a libSQL URL or file path, or an `agl store` server's http(s) URL. */
  store: z.string().min(1).optional(),
  /** `Host` names answered besides localhost, IP addresses and `host` (src/server/browser-guard.ts). */
  allowed_hosts: z.array(allowedHost).default([]),
});
export type LlmProxyConfig = z.infer<typeof LlmProxyConfig>;
export type LlmProxyConfigInput = z.input<typeof LlmProxyConfig>;

/** An environment variable the configuration names is not set. */
export class MissingEnvironmentVariableError extends LightningError {
  override readonly errorType = "MissingEnvironmentVariableError";
  override readonly status = 400;
  constructor(
    readonly variable: string,
    readonly field: string,
  ) {
    super(`environment variable ${variable} (named by ${field}) is not set`);
  }
}

export function parseLlmProxyConfig(value: unknown): LlmProxyConfig {
  const r = LlmProxyConfig.safeParse(value);
  if (!r.success) throw ValidationError.fromZod(r.error, "LLM proxy config");
  return r.data;
}

export function parseProxyModelList(value: unknown): ProxyModelEntry[] {
  const r = ProxyModelList.safeParse(value);
  if (!r.success) throw ValidationError.fromZod(r.error, "model list");
  return r.data;
}

/** A JSON configuration file's text (JSON only: no YAML). */
export function parseLlmProxyConfigText(text: string, source: string): LlmProxyConfig {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new ValidationError(`${source} is not valid JSON: ${e instanceof Error ? e.message : String(e)}`, []);
  }
  return parseLlmProxyConfig(value);
}

/** A model as the proxy uses it: its API key read from the environment. */
export interface ResolvedModel extends ProxyModelEntry {
  apiKey: string | null;
}

export function resolveModels(models: ProxyModelEntry[], env: (name: string) => string | undefined): ResolvedModel[] {
  return models.map((m, i) => {
    if (m.api_key_env === undefined) return { ...m, apiKey: null };
    const key = env(m.api_key_env);
    if (key === undefined || key === "") throw new MissingEnvironmentVariableError(m.api_key_env, `models.${i}.api_key_env`);
    return { ...m, apiKey: key };
  });
}
