import { z } from "zod";
import { ValidationError } from "./errors.ts";
import { formatFString } from "./prompt-template.ts";

const llmFields = {
  endpoint: z.string(),
  model: z.string(),
  api_key: z.string().nullable().default(null),
  sampling_parameters: z.record(z.string(), z.unknown()).default({}),
};

export const LLM = z.object({ resource_type: z.literal("llm"), ...llmFields });
export type LLM = z.infer<typeof LLM>;

/** An LLM reached through the proxy, which routes by `/rollout/{rid}/attempt/{aid}`. */
export const ProxyLLM = z.object({ resource_type: z.literal("proxy_llm"), ...llmFields });
export type ProxyLLM = z.infer<typeof ProxyLLM>;

export const PromptTemplateEngine = z.enum(["jinja", "f-string", "poml"]);
export const PromptTemplate = z.object({
  resource_type: z.literal("prompt_template"),
  template: z.string(),
  engine: PromptTemplateEngine,
});
export type PromptTemplate = z.infer<typeof PromptTemplate>;

/**
 * A policy's weights carried in the store (a Lightning TS resource, docs/browser.md): an algorithm that
 * cannot serve HTTP (a browser tab) publishes them, and the runners' side serves them. `data` is base64:
 * for `lightning-ts`, a whole-model checkpoint file (src/model/checkpoint.ts: config, parameters); for
 * `peft`, a LoRA adapter's `adapter_model.safetensors`, its `adapter_config.json` in `adapter_config`.
 * `step` orders versions: a runner loads weights newer than the ones it serves.
 */
export const PolicyWeights = z.object({
  resource_type: z.literal("model_weights"),
  format: z.enum(["lightning-ts", "peft"]),
  data: z.string(),
  adapter_config: z.string().nullable().default(null),
  step: z.number().int().nonnegative().default(0),
});
export type PolicyWeights = z.infer<typeof PolicyWeights>;

export const Resource = z.discriminatedUnion("resource_type", [LLM, ProxyLLM, PromptTemplate, PolicyWeights]);
export type Resource = z.infer<typeof Resource>;

export const NamedResources = z.record(z.string(), Resource);
export type NamedResources = z.infer<typeof NamedResources>;
export type NamedResourcesInput = z.input<typeof NamedResources>;

export const ResourcesUpdate = z.object({
  resources_id: z.string(),
  create_time: z.number(),
  update_time: z.number(),
  version: z.number().int(),
  resources: NamedResources,
});
export type ResourcesUpdate = z.infer<typeof ResourcesUpdate>;

/**
 * The base URL a rollout's LLM calls go to: `{endpoint}/rollout/{rid}/attempt/{aid}`, keeping a
 * trailing `/v1` at the end as upstream does.
 */
export function proxyBaseUrl(endpoint: string, rolloutId: string | null, attemptId: string | null): string {
  if (rolloutId === null && attemptId === null) return endpoint;
  if (rolloutId === null || attemptId === null) {
    throw new ValidationError("rollout_id and attempt_id must be given together", []);
  }
  let base = endpoint.endsWith("/") ? endpoint.slice(0, -1) : endpoint;
  const hadV1 = base.endsWith("/v1");
  if (hadV1) base = base.slice(0, -3);
  base += `/rollout/${rolloutId}/attempt/${attemptId}`;
  return hadV1 ? `${base}/v1` : base;
}

/** A ProxyLLM bound to one attempt becomes a plain LLM whose endpoint carries the routing prefix. */
export function proxyLlmForAttempt(llm: ProxyLLM, rolloutId: string, attemptId: string): LLM {
  return { ...llm, resource_type: "llm", endpoint: proxyBaseUrl(llm.endpoint, rolloutId, attemptId) };
}

/** Formats an `f-string` template with Python `str.format` semantics for named fields (`{name}`, `{{`, `}}`).
 * `renderPromptTemplate` (prompt-template.ts) also renders `jinja`. */
export function formatPromptTemplate(t: PromptTemplate, values: Record<string, unknown>): string {
  if (t.engine !== "f-string") {
    throw new ValidationError(`prompt template engine '${t.engine}' cannot be formatted; only 'f-string' is supported`, ["engine"]);
  }
  return formatFString(t.template, values);
}
