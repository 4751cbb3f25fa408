/**
 * The policy server: an OpenAI-compatible `/v1/chat/completions` and `/v1/completions` (Hono) that
 * answers with the current policy version and returns `prompt_token_ids` and per-choice `token_ids`
 * (the vLLM convention). Requests under upstream's routing prefix `/rollout/{rid}/attempt/{aid}/…`
 * are recorded in the store as LLM-call spans (llm-span.ts), with a sequence id allocated when the
 * request arrives, so an agent written with the official `openai` client needs no tracing code. A routed
 * call without a `seed` is seeded from its rollout's `sampling_seed` when it has one (sampling-seed.ts),
 * else from the policy's stream of seeds.
 *
 * A request may name its agent (`x-agent-name`, tracer/agent-scope.ts): the span records it as
 * `gen_ai.agent.name`, and with `agentMatch` set only the calls of matching agents are served with the
 * policy's LoRA adapter, the others by the frozen base (docs/agents.md#training-only-some-agents).
 *
 * Streaming answers are the OpenAI SSE chunk format, produced once the generation has finished (as
 * upstream's stream-conversion middleware does): each chunk carries its `token_ids`, the first one the
 * `prompt_token_ids`.
 */
import { Hono, type Context } from "hono";
import type { LightningStore } from "../store/base.ts";
import type { Clock } from "../types/clock.ts";
import { systemClock } from "../types/clock.ts";
import { PROMETHEUS_CONTENT_TYPE } from "../metrics/registry.ts";
import { type PolicyEndpoint, PolicyMetrics } from "./policy-metrics.ts";
import { ValidationError } from "../types/errors.ts";
import { newSpanId } from "../types/ids.ts";
import type { LLM, ProxyLLM } from "../types/resources.ts";
import { byteTokenizer } from "../model/tokenizer.ts";
import type { TemplateMessage, ToolCall, ToolDefinition } from "../model/tokenizer-api.ts";
import { decodeWithOffsets } from "../model/detokenize.ts";
import type { JsonObject } from "../tracer/gen-ai.ts";
import { readJsonBody } from "../server/json-body.ts";
import { agentMatcher } from "../adapter/agent-name.ts";
import { llmCallSpans } from "./llm-span.ts";
import {
  installOpenAiBasics,
  llmResource,
  nodeServe,
  type OpenAiAccess,
  OpenAiError,
  type ResourceOptions,
  ROUTE_PREFIXES,
  requestAgentName,
  routedAttempt,
  type ServeFn,
  SSE_HEADERS,
  v1Endpoint,
} from "./openai-http.ts";
import type { Generation } from "../model/generation.ts";
import { ChatCompletionRequest, CompletionRequest, contentText, stopList, type ChatMessageInput } from "./openai-schemas.ts";
import type { Policy } from "./policy.ts";
import { recordedLlmCalls, routedCallSeed } from "./sampling-seed.ts";
import { parseToolCalls } from "./tool-calls.ts";

/** `token`, `bindAddress` and `allowedHosts`: who may call (openai-http.ts). */
export interface PolicyAppOptions extends OpenAiAccess {
  policy: Policy;
  /** Where routed calls are recorded; without it nothing is recorded. */
  store?: LightningStore | null;
  clock?: Clock;
  /**
   * Selective optimisation with LoRA: only calls whose agent name (`x-agent-name`) matches are served
   * with the adapter; other agents' calls, and calls that name none, get the frozen base. Unset: every
   * call gets the policy's weights.
   */
  agentMatch?: string | RegExp | null;
  /** Serve `GET /metrics`: requests, latency, tokens, the policy version, then the process's registry
   * (policy-metrics.ts). Default true. */
  metrics?: boolean;
}

type Kind = "chat" | "completion";

const endpointOf = (kind: Kind): PolicyEndpoint => (kind === "chat" ? "chat" : "completions");

const CHAT_ROLES: Record<ChatMessageInput["role"], string> = {
  system: "system",
  developer: "system",
  user: "user",
  assistant: "assistant",
  tool: "tool",
};

interface Prepared {
  kind: Kind;
  /** A completion's prompt as text (a token-id prompt decoded), for the span; null for a chat. */
  promptText: string | null;
  promptIds: number[];
  /** Tools offered (chat only): the model's output is parsed for calls when there are some. */
  tools: ToolDefinition[] | null;
  temperature: number;
  topP: number;
  maxTokens: number;
  n: number;
  stop: string[];
  stopTokenIds: number[] | undefined;
  seed: number | undefined;
  stream: boolean;
  includeUsage: boolean;
  logprobs: boolean;
  topLogprobs: number;
}

function parse<T>(
  schema: { safeParse(v: unknown): { success: true; data: T } | { success: false; error: import("zod").ZodError } },
  v: unknown,
): T {
  const r = schema.safeParse(v);
  if (!r.success) throw ValidationError.fromZod(r.error, "request");
  return r.data;
}

function prepare(policy: Policy, kind: Kind, body: unknown): Prepared {
  let promptText: string | null = null;
  let promptIds: number[];
  let tools: ToolDefinition[] | null = null;
  let logprobs: boolean;
  /** Alternatives per token (chat `top_logprobs`, a completion's `logprobs: N`). */
  let topLogprobs: number;
  let req: ChatCompletionRequest | CompletionRequest;
  let maxTokens: number | null | undefined;
  if (kind === "chat") {
    const chat = parse(ChatCompletionRequest, body);
    req = chat;
    const turns: TemplateMessage[] = chat.messages.map((m) => ({
      role: CHAT_ROLES[m.role],
      content: contentText(m.content),
      ...(m.tool_calls?.length
        ? {
            tool_calls: m.tool_calls.map(
              (c): ToolCall => ({ id: c.id, type: "function", function: { name: c.function.name, arguments: c.function.arguments } }),
            ),
          }
        : {}),
      ...(m.tool_call_id !== undefined ? { tool_call_id: m.tool_call_id } : {}),
      ...(m.name !== undefined ? { name: m.name } : {}),
    }));
    tools = chat.tools?.length && chat.tool_choice !== "none" ? (chat.tools as ToolDefinition[]) : null;
    promptIds = policy.tokenizer.applyChatTemplate(turns, { addGenerationPrompt: true, ...(tools ? { tools } : {}) });
    logprobs = chat.logprobs === true;
    topLogprobs = chat.top_logprobs ?? 0;
    // as OpenAI: the alternatives come with the sampled tokens' log-probs, never alone
    if (topLogprobs > 0 && !logprobs) throw new ValidationError("top_logprobs needs logprobs: true", ["top_logprobs"]);
    maxTokens = chat.max_completion_tokens ?? chat.max_tokens;
  } else {
    const comp = parse(CompletionRequest, body);
    req = comp;
    if (typeof comp.prompt === "string") {
      // As vLLM: a text prompt is encoded like HF's `tokenizer(text)`, with the model's BOS if it has one.
      promptIds = policy.tokenizer.encode(comp.prompt, { addSpecialTokens: comp.add_special_tokens ?? true });
      if (promptIds.length === 0) throw new ValidationError("prompt must not be empty", ["prompt"]);
    } else promptIds = comp.prompt;
    promptText = typeof comp.prompt === "string" ? comp.prompt : policy.tokenizer.decode(comp.prompt, { skipSpecialTokens: false });
    // As OpenAI: `logprobs: 0` gives the sampled tokens' log-probabilities, N more the N likeliest others.
    logprobs = comp.logprobs !== undefined && comp.logprobs !== null;
    topLogprobs = comp.logprobs ?? 0;
    maxTokens = comp.max_tokens ?? 16; // the OpenAI default for completions
  }
  if (req.model !== policy.model)
    throw new OpenAiError(
      404,
      "invalid_request_error",
      `The model '${req.model}' does not exist; this server serves '${policy.model}'`,
      "model_not_found",
    );
  const room = policy.maxSeqLen - promptIds.length;
  if (room <= 0)
    throw new OpenAiError(
      400,
      "invalid_request_error",
      `The prompt has ${promptIds.length} tokens; the model's context is ${policy.maxSeqLen}`,
      "context_length_exceeded",
    );
  if (maxTokens !== undefined && maxTokens !== null && maxTokens > room)
    throw new OpenAiError(
      400,
      "invalid_request_error",
      `This model's maximum context length is ${policy.maxSeqLen} tokens; the request asks for ${promptIds.length + maxTokens} (${promptIds.length} in the prompt, ${maxTokens} to generate)`,
      "context_length_exceeded",
    );
  return {
    kind,
    promptText,
    promptIds,
    tools,
    temperature: req.temperature ?? 1,
    topP: req.top_p ?? 1,
    maxTokens: Math.min(maxTokens ?? room, room),
    n: req.n ?? 1,
    stop: stopList(req.stop),
    stopTokenIds: req.stop_token_ids ?? undefined,
    seed: req.seed ?? undefined,
    stream: req.stream === true,
    includeUsage: req.stream_options?.include_usage === true,
    logprobs,
    topLogprobs,
  };
}

interface Answer {
  id: string;
  created: number;
  prompt: Prepared;
  choices: Generation[];
  version: number;
}

const usage = (a: Answer) => {
  const completion = a.choices.reduce((s, c) => s + c.tokenIds.length, 0);
  return { prompt_tokens: a.prompt.promptIds.length, completion_tokens: completion, total_tokens: a.prompt.promptIds.length + completion };
};

const tokenText = (policy: Policy, id: number): string => policy.tokenizer.decode([id], { skipSpecialTokens: false });
const tokenBytes = (token: string): number[] => Array.from(new TextEncoder().encode(token));

/** A chat choice's `logprobs` for the sampled tokens `from` .. `from + ids.length` of `g`, each with the
 * likeliest alternatives the request asked for (`top_logprobs`). */
function chatLogprobs(policy: Policy, g: Generation, from = 0, ids: readonly number[] = g.tokenIds) {
  return {
    content: ids.map((id, i) => {
      const token = tokenText(policy, id);
      const top = (g.topLogprobs?.[from + i] ?? []).map((alt) => {
        const text = tokenText(policy, alt.id);
        return { token: text, logprob: alt.logprob, bytes: tokenBytes(text) };
      });
      return { token, logprob: g.logprobs[from + i], bytes: tokenBytes(token), top_logprobs: top };
    }),
  };
}

/** A completion choice's `logprobs` for the same tokens: per token, the likeliest alternatives asked for
 * (`logprobs: N`) and the sampled token itself, by text (as OpenAI: up to N + 1 entries; where two ids read
 * the same, the likelier one's). */
function completionLogprobs(policy: Policy, g: Generation, from = 0, ids: readonly number[] = g.tokenIds) {
  const tokens = ids.map((id) => tokenText(policy, id));
  const lps = ids.map((_, i) => g.logprobs[from + i]!);
  const top = tokens.map((t, i) => {
    const entries: Record<string, number> = Object.create(null);
    for (const alt of g.topLogprobs?.[from + i] ?? []) entries[tokenText(policy, alt.id)] ??= alt.logprob;
    entries[t] ??= lps[i];
    return entries;
  });
  return { tokens, token_logprobs: lps, top_logprobs: top, text_offset: null };
}

/** The assistant message of a chat choice: tool calls parsed out of its text when tools were offered. */
function assistantMessage(policy: Policy, a: Answer, g: Generation): { content: string | null; toolCalls: ToolCall[] } {
  if (!a.prompt.tools) return { content: g.text, toolCalls: [] };
  const parsed = parseToolCalls(g.text, policy.tokenizer.toolCallFormat);
  return { content: parsed.content, toolCalls: parsed.toolCalls };
}

function fullBody(policy: Policy, a: Answer): unknown {
  const head = {
    id: a.id,
    created: a.created,
    model: policy.model,
    system_fingerprint: `policy-v${a.version}`,
    prompt_token_ids: a.prompt.promptIds,
  };
  if (a.prompt.kind === "chat") {
    return {
      ...head,
      object: "chat.completion",
      choices: a.choices.map((g, index) => {
        const m = assistantMessage(policy, a, g);
        return {
          index,
          message: { role: "assistant", content: m.content, refusal: null, ...(m.toolCalls.length ? { tool_calls: m.toolCalls } : {}) },
          finish_reason: m.toolCalls.length ? "tool_calls" : g.finishReason,
          logprobs: a.prompt.logprobs ? chatLogprobs(policy, g) : null,
          token_ids: g.tokenIds,
        };
      }),
      usage: usage(a),
    };
  }
  return {
    ...head,
    object: "text_completion",
    choices: a.choices.map((g, index) => ({
      index,
      text: g.text,
      finish_reason: g.finishReason,
      logprobs: a.prompt.logprobs ? completionLogprobs(policy, g) : null,
      token_ids: g.tokenIds,
    })),
    usage: usage(a),
  };
}

/**
 * Text deltas of one generation: consecutive tokens are grouped until they add text (whole characters),
 * and the deltas add up to exactly `text` (which a stop string may have cut short). Linear in the
 * number of tokens (detokenize.ts).
 */
export function textDeltas(g: Generation, tokenizer: Policy["tokenizer"] = byteTokenizer): { text: string; tokenIds: number[] }[] {
  const { ends } = decodeWithOffsets(tokenizer, g.tokenIds);
  const out: { text: string; tokenIds: number[] }[] = [];
  let emitted = 0;
  let pending: number[] = [];
  for (let k = 0; k < g.tokenIds.length; k++) {
    pending.push(g.tokenIds[k]);
    const upto = Math.max(emitted, Math.min(ends[k], g.text.length));
    if (upto === emitted && k + 1 < g.tokenIds.length) continue; // no whole character yet
    out.push({ text: g.text.slice(emitted, upto), tokenIds: pending });
    emitted = upto;
    pending = [];
  }
  return out;
}

function streamChunks(policy: Policy, a: Answer): unknown[] {
  const chat = a.prompt.kind === "chat";
  const head = {
    id: a.id,
    created: a.created,
    model: policy.model,
    system_fingerprint: `policy-v${a.version}`,
    object: chat ? "chat.completion.chunk" : "text_completion",
  };
  const chunks: unknown[] = [];
  // A chunk's log-probs, when asked, are those of its own tokens (`from` is the first one's index), as OpenAI and vLLM send them.
  const logprobsOf = (g: Generation, from: number, tokenIds: number[]) =>
    !a.prompt.logprobs || tokenIds.length === 0
      ? null
      : chat
        ? chatLogprobs(policy, g, from, tokenIds)
        : completionLogprobs(policy, g, from, tokenIds);
  const choice = (index: number, text: string | null, tokenIds: number[], finish: string | null, logprobs: unknown = null) =>
    chat
      ? { index, delta: text === null ? {} : { content: text }, finish_reason: finish, logprobs, token_ids: tokenIds }
      : { index, text: text ?? "", finish_reason: finish, logprobs, token_ids: tokenIds };
  a.choices.forEach((g, index) => {
    const first = chat
      ? { index, delta: { role: "assistant", content: "" }, finish_reason: null, logprobs: null, token_ids: [] }
      : choice(index, "", [], null);
    chunks.push({ ...head, choices: [first], ...(index === 0 ? { prompt_token_ids: a.prompt.promptIds } : {}) });
    const calls = chat ? assistantMessage(policy, a, g) : { content: g.text, toolCalls: [] };
    if (calls.toolCalls.length === 0) {
      let from = 0;
      for (const d of textDeltas(g, policy.tokenizer)) {
        chunks.push({ ...head, choices: [choice(index, d.text, d.tokenIds, null, logprobsOf(g, from, d.tokenIds))] });
        from += d.tokenIds.length;
      }
      chunks.push({ ...head, choices: [choice(index, null, [], g.finishReason)] });
      return;
    }
    // Tool calls: the content outside them, then each call whole (the streamed form of OpenAI's deltas).
    if (calls.content !== null) chunks.push({ ...head, choices: [choice(index, calls.content, [], null)] });
    const toolDeltas = calls.toolCalls.map((c, i) => ({ index: i, id: c.id, type: "function", function: c.function }));
    chunks.push({
      ...head,
      choices: [
        { index, delta: { tool_calls: toolDeltas }, finish_reason: null, logprobs: logprobsOf(g, 0, g.tokenIds), token_ids: g.tokenIds },
      ],
    });
    chunks.push({ ...head, choices: [choice(index, null, [], "tool_calls")] });
  });
  if (a.prompt.includeUsage) chunks.push({ ...head, choices: [], usage: usage(a) });
  return chunks;
}

function sseResponse(chunks: unknown[]): Response {
  const enc = new TextEncoder();
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const c of chunks) controller.enqueue(enc.encode(`data: ${JSON.stringify(c)}\n\n`));
      controller.enqueue(enc.encode("data: [DONE]\n\n"));
      controller.close();
    },
  });
  return new Response(body, {
    status: 200,
    headers: SSE_HEADERS,
  });
}

/** The OpenAI-compatible app. Every route exists both bare and under `/rollout/:rid/attempt/:aid`. */
export function createPolicyApp(options: PolicyAppOptions): Hono {
  const { policy } = options;
  const store = options.store ?? null;
  const clock = options.clock ?? systemClock;
  const adapterFor = options.agentMatch == null ? null : agentMatcher(options.agentMatch);
  const metrics = options.metrics === false ? null : new PolicyMetrics(() => policy.version);
  const app = new Hono();
  installOpenAiBasics(app, options);
  if (metrics) app.get("/metrics", (c) => c.body(metrics.render(), 200, { "content-type": PROMETHEUS_CONTENT_TYPE }));

  // Routed calls answering now, per attempt: concurrent calls of one attempt get distinct call numbers
  // (recorded calls + those ahead of them + 1); the entry goes when the attempt has none in flight.
  const inFlight = new Map<string, number>();
  const callNumber = async (routed: { rolloutId: string; attemptId: string }, ahead: number): Promise<number> =>
    (await recordedLlmCalls(store!, routed.rolloutId, routed.attemptId)) + ahead + 1;

  const complete = (kind: Kind) => async (c: Context) => {
    const routed = routedAttempt(c);
    const key = routed === null ? null : `${routed.rolloutId}\u0000${routed.attemptId}`;
    const ahead = key === null ? 0 : (inFlight.get(key) ?? 0);
    if (key !== null) inFlight.set(key, ahead + 1);
    try {
      return await answer(kind, c, routed, ahead);
    } finally {
      if (key !== null) {
        const left = (inFlight.get(key) ?? 1) - 1;
        if (left === 0) inFlight.delete(key);
        else inFlight.set(key, left);
      }
    }
  };

  const answer = async (kind: Kind, c: Context, routed: ReturnType<typeof routedAttempt>, ahead: number) => {
    const startTime = clock.now();
    const agentName = requestAgentName(c);
    const body = await readJsonBody(c, false);
    const prepared = prepare(policy, kind, body);
    const adapter = adapterFor === null ? null : adapterFor(agentName);
    // One sequence id per request, taken when it arrives (upstream's RolloutAttemptMiddleware).
    const sequenceId = routed !== null && store !== null ? await store.getNextSpanSequenceId(routed.rolloutId, routed.attemptId) : null;
    // a routed call is seeded from its rollout when the rollout names a sampling seed, so the samples do
    // not depend on the order concurrent calls arrive in (sampling-seed.ts)
    const rolloutSeed =
      prepared.seed === undefined && sequenceId !== null
        ? await routedCallSeed(store!, routed!.rolloutId, routed!.attemptId, () => callNumber(routed!, ahead))
        : null;
    const baseSeed = prepared.seed ?? rolloutSeed ?? policy.nextSeed();
    const version = policy.version;
    const choices = await policy.generate(
      Array.from({ length: prepared.n }, (_, i) => ({
        prompt: prepared.promptIds,
        maxTokens: prepared.maxTokens,
        temperature: prepared.temperature,
        topP: prepared.topP,
        stop: prepared.stop,
        stopTokenIds: prepared.stopTokenIds,
        seed: (baseSeed + i) >>> 0,
        topLogprobs: prepared.topLogprobs,
      })),
      adapter === null ? {} : { adapter },
    );
    metrics?.tokens(
      endpointOf(kind),
      prepared.promptIds.length,
      choices.reduce((sum, g) => sum + g.tokenIds.length, 0),
    );
    const answer: Answer = {
      id: `${kind === "chat" ? "chatcmpl" : "cmpl"}-${newSpanId()}`,
      created: Math.floor(clock.now()),
      prompt: prepared,
      choices,
      version,
    };
    const full = fullBody(policy, answer) as JsonObject;
    if (sequenceId !== null) {
      const request: JsonObject = {
        ...(body as JsonObject),
        model: policy.model,
        temperature: prepared.temperature,
        top_p: prepared.topP,
        max_tokens: prepared.maxTokens,
        n: prepared.n,
        ...(prepared.promptText !== null ? { prompt: prepared.promptText } : {}),
      };
      const spans = llmCallSpans({
        rolloutId: routed!.rolloutId,
        attemptId: routed!.attemptId,
        sequenceId,
        request,
        response: full,
        policyVersion: version,
        agentName,
        adapter,
        choices,
        startTime,
        endTime: clock.now(),
      });
      await store!.addManySpans(spans);
    }
    return prepared.stream ? sseResponse(streamChunks(policy, answer)) : c.json(full);
  };

  // Counted around the route, so a refused request (a 400 from onError) is counted with its status.
  const track = (kind: Kind) => async (c: Context, next: () => Promise<void>) => {
    if (!metrics) return next();
    const end = metrics.start(endpointOf(kind), () => clock.now());
    try {
      await next();
    } finally {
      end(c.res.status);
    }
  };
  for (const prefix of ROUTE_PREFIXES) {
    app.get(`${prefix}/health`, (c) => c.json({ status: "ok" }));
    app.get(`${prefix}/v1/models`, (c) =>
      c.json({
        object: "list",
        data: [{ id: policy.model, object: "model", created: 0, owned_by: "lightning-ts", policy_version: policy.version }],
      }),
    );
    app.post(`${prefix}/v1/chat/completions`, track("chat"), complete("chat"));
    app.post(`${prefix}/v1/completions`, track("completion"), complete("completion"));
  }
  return app;
}

/**
 * What the policy app's servers (on a port, and in-process: in-process.ts) share: the policy, the store
 * routed calls are recorded into (settable until the server starts), the app they answer with, and the
 * server as a resource.
 */
export abstract class PolicyAppServer {
  readonly policy: Policy;
  private store: LightningStore | null;

  constructor(private readonly appOptions: PolicyAppOptions) {
    this.policy = appOptions.policy;
    this.store = appOptions.store ?? null;
  }

  abstract isRunning(): boolean;

  /** The `/v1` base URL the server's clients call. */
  abstract get endpoint(): string;

  /** The store routed calls are recorded into: before `start()`, or the one it runs with again (a no-op). */
  setStore(store: LightningStore): void {
    if (this.isRunning() && store === this.store) return;
    if (this.isRunning()) throw new ValidationError("setStore must come before start()", ["store"]);
    this.store = store;
  }

  /** The app the server answers with, recording into the store set by now. */
  protected createApp(): Hono {
    const o = this.appOptions;
    return createPolicyApp({
      policy: this.policy,
      store: this.store,
      clock: o.clock,
      token: o.token,
      bindAddress: o.bindAddress,
      allowedHosts: o.allowedHosts,
      agentMatch: o.agentMatch,
    });
  }

  /** The server as a resource: a ProxyLLM (runners bind it to their attempt), or an LLM bound to one attempt. */
  asResource(options: ResourceOptions = {}): ProxyLLM | LLM {
    return llmResource(this.endpoint, this.policy.model, options);
  }
}

/** `hostname` is also the bind address of the `Host` check. */
export interface PolicyServerOptions extends Omit<PolicyAppOptions, "bindAddress"> {
  hostname?: string;
  /** 0 picks a free port [0]. */
  port?: number;
  serve?: ServeFn;
}

/** The policy app on a port, with the lifecycle an algorithm expects of an LLM proxy. */
export class PolicyServer extends PolicyAppServer {
  private handle: { port: number; stop(): Promise<void> } | null = null;

  constructor(private readonly options: PolicyServerOptions) {
    super({ ...options, bindAddress: options.hostname ?? "127.0.0.1" });
  }

  isRunning(): boolean {
    return this.handle !== null;
  }

  async start(): Promise<void> {
    if (this.handle) return;
    const app = this.createApp();
    const serve = this.options.serve ?? (await nodeServe());
    this.handle = await serve(app.fetch, { hostname: this.options.hostname ?? "127.0.0.1", port: this.options.port ?? 0 });
  }

  async stop(): Promise<void> {
    const h = this.handle;
    this.handle = null;
    if (h) await h.stop();
  }

  /** `http://host:port/v1` (throws before start). */
  get endpoint(): string {
    if (!this.handle) throw new ValidationError("the policy server is not running", []);
    return v1Endpoint(this.options.hostname ?? "127.0.0.1", this.handle.port);
  }
}
