/**
 * span_to_triplet: one LLM-call span to a Triplet, reading upstream's attribute keys (which keys, in which
 * order: docs/adapters.md#tracetripletadapter, step 4).
 */
import { filterAndUnflatten, isEmptyNested } from "../types/attributes.ts";
import type { Span } from "../types/span.ts";
import { tokenIds } from "./python-literal.ts";
import { semconvInputMessages, semconvOutputMessages, tokenUsage } from "./semconv.ts";
import type { Triplet } from "./types.ts";

const PROMPT_TOKEN_KEYS = ["prompt_token_ids", "agentlightning.operation.output.prompt_token_ids"];
const RESPONSE_TOKEN_KEYS = [
  "response_token_ids",
  "agentlightning.operation.output.response_token_ids.0",
  "agentlightning.operation.output.choices.0.token_ids",
  "agentlightning.operation.output.choices.0.provider_specific_fields.token_ids",
];
const RESPONSE_ID_KEYS = ["gen_ai.response.id", "agentlightning.operation.output.id"];

/** The first present key whose value is an integer array (or its Python repr); [] when none. */
export function firstTokenIds(attrs: Record<string, unknown>, keys: readonly string[]): number[] {
  for (const k of keys) {
    if (!(k in attrs)) continue;
    const ids = tokenIds(attrs[k]);
    if (ids) return ids;
  }
  return [];
}

export const promptTokenIds = (s: Span) => firstTokenIds(s.attributes, PROMPT_TOKEN_KEYS);
export const responseTokenIds = (s: Span) => firstTokenIds(s.attributes, RESPONSE_TOKEN_KEYS);

/** The first string among gen_ai.response.id / agentlightning.operation.output.id. */
export function responseIdOf(span: Span): string | null {
  for (const k of RESPONSE_ID_KEYS) {
    const v = span.attributes[k];
    if (typeof v === "string") return v;
  }
  return null;
}

function firstNonEmpty(attrs: Record<string, unknown>, prefixes: readonly string[]): unknown {
  for (const p of prefixes) {
    const v = filterAndUnflatten(attrs, p);
    if (!isEmptyNested(v)) return v;
  }
  return null;
}

function withoutKeys(v: unknown, keys: readonly string[]): unknown {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return v;
  const out = { ...(v as Record<string, unknown>) };
  for (const k of keys) delete out[k];
  return out;
}

/** Image URLs of the prompt's messages, in order. */
export function imageUrls(raw: unknown): string[] {
  let entries: unknown[];
  if (Array.isArray(raw)) entries = raw;
  else if (typeof raw === "object" && raw !== null) {
    const obj = raw as Record<string, unknown>;
    const digits = Object.keys(obj)
      .filter((k) => /^\d+$/.test(k))
      .sort((a, b) => Number(a) - Number(b));
    entries = digits.length > 0 ? digits.map((k) => obj[k]) : [obj];
  } else entries = [];
  const urls: string[] = [];
  for (const e of entries) {
    if (typeof e !== "object" || e === null || !("content" in e)) continue;
    let content = (e as Record<string, unknown>).content;
    if (typeof content === "string") {
      try {
        content = JSON.parse(content);
      } catch {
        continue;
      }
    }
    if (!Array.isArray(content)) continue;
    for (const part of content) {
      const p = part as Record<string, unknown> | null;
      const img = p?.image_url as Record<string, unknown> | undefined;
      if (p?.type === "image_url" && typeof img === "object" && img !== null && "url" in img) urls.push(img.url as string);
    }
  }
  return urls;
}

export function spanToTriplet(span: Span, agent: string | null): Triplet {
  const attrs = span.attributes;
  // Semantic-convention JSON messages only where the indexed keys (upstream's) are absent.
  const promptRaw = firstNonEmpty(attrs, ["gen_ai.prompt", "agentlightning.operation.input.messages"]) ?? semconvInputMessages(attrs);
  const response: Record<string, unknown> = {
    token_ids: responseTokenIds(span),
    raw_content: firstNonEmpty(attrs, ["gen_ai.completion", "agentlightning.operation.output.choices"]) ?? semconvOutputMessages(attrs),
  };
  if (typeof attrs["logprobs.content"] === "string") response.logprobs = JSON.parse(attrs["logprobs.content"]);
  const metadata: Record<string, unknown> = {
    request: withoutKeys(firstNonEmpty(attrs, ["gen_ai.request", "agentlightning.operation.input"]), ["messages"]),
    response: withoutKeys(firstNonEmpty(attrs, ["gen_ai.response", "agentlightning.operation.output"]), [
      "choices",
      "prompt_token_ids",
      "response_token_ids",
    ]),
    response_id: responseIdOf(span),
    agent_name: agent,
  };
  const usage = tokenUsage(attrs);
  if (usage !== null) metadata.usage = usage;
  return {
    prompt: { token_ids: promptTokenIds(span), raw_content: promptRaw, image_urls: imageUrls(promptRaw) },
    response,
    reward: null,
    metadata,
  };
}
