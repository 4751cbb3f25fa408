/**
 * `traceOpenAI(client)`: every chat or text completion an `openai` client makes becomes an LLM-call span
 * (`openai.chat.completion` / `openai.completion`) through the active OpenTelemetry tracer, so inside a
 * rollout it lands in the attempt and the trace adapters train on it (docs/tracing.md#tracing-openai-calls).
 *
 * It wraps the client instance's `create` methods rather than patching the `openai` module as it loads,
 * so it needs no loader hook and works the same on Node (ESM or CJS), Deno and Bun. The client's types
 * are structural: this file never imports `openai` (an optional peer dependency).
 */
import { context, type Span as ApiSpan, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import type { Attributes } from "../types/span.ts";
import { ValidationError } from "../types/errors.ts";
import { formatExceptionAttributes } from "./attributes.ts";
import { assembleStream, openAiCallAttributes } from "./gen-ai.ts";
import { getLogger } from "../platform/log.ts";

const log = getLogger("agentlightning.tracer");

type JsonObject = Record<string, unknown>;
/** Any `create` method: its overloads accept `never`, so the SDK's are assignable; calls go through `invoke`. */
type CreateFn = (...args: never[]) => unknown;
const invoke = (fn: CreateFn, self: unknown, args: unknown[]): unknown => (fn as (...a: unknown[]) => unknown).apply(self, args);

/** What `traceOpenAI` needs of a client: the `create` methods it wraps (an `openai` v6 `OpenAI` instance fits). */
export interface OpenAIClientLike {
  chat: { completions: { create: CreateFn } };
  completions?: { create: CreateFn };
}

export interface TraceOpenAIOptions {
  /**
   * Adds `return_token_ids: true` to every request body (unless the body sets it), so that vLLM, SGLang
   * or the Lightning policy server answer with `prompt_token_ids` and per-choice `token_ids`, which the
   * span records for the triplet adapter. Other servers may reject the unknown field.
   */
  returnTokenIds?: boolean;
  /** Instrumentation scope of the spans (default `agentlightning.openai`). */
  tracerName?: string;
}

export const OPENAI_CHAT_SPAN_NAME = "openai.chat.completion";
export const OPENAI_COMPLETION_SPAN_NAME = "openai.completion";
/** Set (true) on a streamed call's span when the caller stopped reading before the stream ended. */
export const STREAM_ENDED_EARLY_ATTRIBUTE = "lightning.stream.ended_early";

interface Endpoint {
  spanName: string;
  /** The GenAI semantic-convention operation, which the adapters also recognise LLM calls by. */
  operation: "chat" | "text_completion";
}

const CHAT: Endpoint = { spanName: OPENAI_CHAT_SPAN_NAME, operation: "chat" };
const TEXT: Endpoint = { spanName: OPENAI_COMPLETION_SPAN_NAME, operation: "text_completion" };

/** Marks a wrapped `create`, so wrapping again (or wrapping an instance of an instrumented class) adds no second span. */
const TRACED = Symbol.for("agentlightning.openai.traced");

const isObject = (v: unknown): v is JsonObject => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Wraps `client.chat.completions.create` and `client.completions.create` of this client instance (in
 * place) and returns the client, with its type unchanged. Wrapping a client twice changes nothing.
 */
export function traceOpenAI<T extends OpenAIClientLike>(client: T, options: TraceOpenAIOptions = {}): T {
  if (!isObject(client?.chat?.completions) || typeof client.chat.completions.create !== "function") {
    throw new ValidationError("traceOpenAI needs an openai client: client.chat.completions.create is not a function", [
      "client",
      "chat",
      "completions",
      "create",
    ]);
  }
  wrapCreate(client.chat.completions, CHAT, options);
  if (isObject(client.completions) && typeof client.completions.create === "function") wrapCreate(client.completions, TEXT, options);
  return client;
}

/** The `openai` package's default export (or any class with the same static resource classes). */
export interface OpenAIClassLike {
  Chat: { Completions: { prototype: { create: CreateFn } } };
  Completions?: { prototype: { create: CreateFn } };
}

/**
 * Wraps the `create` methods on the prototypes of an `OpenAI` class, so every client made from it (even
 * inside libraries) is traced. Idempotent; `traceOpenAI` on such a client changes nothing.
 */
export function instrumentOpenAI(OpenAI: OpenAIClassLike, options: TraceOpenAIOptions = {}): void {
  const chat = OpenAI?.Chat?.Completions?.prototype;
  if (!isObject(chat) || typeof chat.create !== "function") {
    throw new ValidationError("instrumentOpenAI needs the OpenAI class: OpenAI.Chat.Completions.prototype.create is not a function", [
      "OpenAI",
      "Chat",
      "Completions",
    ]);
  }
  wrapCreate(chat, CHAT, options);
  const text = OpenAI.Completions?.prototype;
  if (isObject(text) && typeof text.create === "function") wrapCreate(text, TEXT, options);
}

function wrapCreate(holder: { create: CreateFn }, endpoint: Endpoint, options: TraceOpenAIOptions): void {
  const original = holder.create as CreateFn & { [TRACED]?: true };
  if (original[TRACED]) return;
  const traced = function (this: unknown, ...args: unknown[]): unknown {
    return tracedCall(original, this, args, endpoint, options);
  } as CreateFn & { [TRACED]?: true };
  traced[TRACED] = true;
  holder.create = traced;
}

/** The SDK's `APIPromise` parts used: `_thenUnwrap` post-processes the parsed body without reading it twice. */
interface ApiPromiseLike extends PromiseLike<unknown> {
  _thenUnwrap(transform: (data: unknown) => unknown): unknown;
  asResponse(): Promise<unknown>;
}

const isApiPromise = (v: unknown): v is ApiPromiseLike =>
  typeof v === "object" &&
  v !== null &&
  typeof (v as ApiPromiseLike).then === "function" &&
  typeof (v as ApiPromiseLike)._thenUnwrap === "function" &&
  typeof (v as ApiPromiseLike).asResponse === "function";

function tracedCall(original: CreateFn, self: unknown, args: unknown[], endpoint: Endpoint, options: TraceOpenAIOptions): unknown {
  const [body, ...rest] = args;
  // Not a request body: the SDK reports the mistake itself.
  if (!isObject(body)) return invoke(original, self, args);
  const request = options.returnTokenIds && body.return_token_ids === undefined ? { ...body, return_token_ids: true } : body;
  const span = trace.getTracer(options.tracerName ?? "agentlightning.openai").startSpan(endpoint.spanName, {
    kind: SpanKind.CLIENT,
    attributes: { "gen_ai.operation.name": endpoint.operation, "gen_ai.system": "openai" },
  });
  if (!span.isRecording()) {
    // No tracer provider (or a sampler said no): nothing to record, so nothing to assemble.
    span.end();
    return invoke(original, self, [request, ...rest]);
  }
  const call = new CallSpan(span, request);
  let result: unknown;
  try {
    // The span is the parent of whatever the SDK traces while it sends (fetch instrumentation, retries).
    result = context.with(trace.setSpan(context.active(), span), () => invoke(original, self, [request, ...rest]));
  } catch (err) {
    call.fail(err);
    throw err;
  }
  const onResult = (value: unknown): unknown => {
    if (request.stream === true && isAsyncIterable(value)) traceStream(value, call);
    else call.succeed(isObject(value) ? value : null);
    return value;
  };
  if (isApiPromise(result)) {
    // Errors before a body (HTTP status, connection) reject the response promise, which asResponse() exposes
    // without reading the body; the parsed body (or stream) passes through onResult when the caller reads it.
    result.asResponse().then(undefined, (err: unknown) => call.fail(err));
    return result._thenUnwrap(onResult);
  }
  if (isThenable(result)) {
    result.then(onResult, (err: unknown) => call.fail(err));
    return result;
  }
  return onResult(result);
}

const isThenable = (v: unknown): v is PromiseLike<unknown> =>
  (typeof v === "object" || typeof v === "function") && v !== null && typeof (v as PromiseLike<unknown>).then === "function";

const isAsyncIterable = (v: unknown): v is AsyncIterable<unknown> =>
  typeof v === "object" && v !== null && typeof (v as AsyncIterable<unknown>)[Symbol.asyncIterator] === "function";

/** The answer to record: a body, none, or how to get it (a stream's chunks folded together). */
type Answer = JsonObject | null | (() => JsonObject | null);
const answer = (a: Answer): JsonObject | null => (typeof a === "function" ? a() : a);

/** One traced call: ends its span once, with the call's attributes. */
class CallSpan {
  private ended = false;
  constructor(
    private readonly span: ApiSpan,
    private readonly request: JsonObject,
  ) {}

  get isEnded(): boolean {
    return this.ended;
  }

  /** `response` may be a function, so that assembling a stream's answer is guarded like the rest of the recording. */
  succeed(response: Answer, extra: Attributes = {}): void {
    this.end(() => {
      this.span.setAttributes({ ...openAiCallAttributes({ request: this.request, response: answer(response) }), ...extra });
    });
  }

  fail(err: unknown, partial: Answer = null): void {
    const status = (err as { status?: unknown } | null)?.status;
    const message = err instanceof Error ? err.message : String(err);
    this.end(() => {
      this.span.setAttributes({
        ...openAiCallAttributes({
          request: this.request,
          response: answer(partial),
          error: { status: typeof status === "number" ? status : null, message },
        }),
        ...formatExceptionAttributes(err),
      });
      this.span.recordException(err instanceof Error ? err : message);
      this.span.setStatus({ code: SpanStatusCode.ERROR, message });
    });
  }

  /** Records and ends the span once. A recording failure must not fail the caller's LLM call: it is logged and marks the span. */
  private end(record: () => void): void {
    if (this.ended) return;
    this.ended = true;
    try {
      record();
    } catch (err) {
      log.error(`Could not record the ${this.request.model ?? ""} LLM call on its span`, err);
      this.span.setStatus({ code: SpanStatusCode.ERROR, message: `recording failed: ${err instanceof Error ? err.message : String(err)}` });
    }
    // Wall-clock milliseconds, as the emitters' spans start: a reward emitted right after the call then never
    // seems to start before the call ended (the SDK's default end adds a sub-millisecond duration to a start
    // rounded down to the millisecond, which can pass a later reward's start).
    this.span.end(Date.now());
  }
}

/**
 * Replaces the stream's iterator (in place, so the SDK's `Stream` keeps `controller`, `tee()` and
 * `toReadableStream()`) with one that hands every chunk on unchanged and ends the span when the stream
 * ends, fails, or the caller stops reading.
 */
function traceStream(stream: AsyncIterable<unknown>, call: CallSpan): void {
  // The SDK's Stream keeps its source in `iterator`, which its async iterator, tee() and toReadableStream() all use.
  const holder = stream as unknown as Record<PropertyKey, unknown>;
  const key: PropertyKey = typeof holder.iterator === "function" ? "iterator" : Symbol.asyncIterator;
  const inner = (holder[key] as () => AsyncIterator<unknown>).bind(stream);
  holder[key] = () => recordChunks(inner(), call);
}

async function* recordChunks(source: AsyncIterator<unknown>, call: CallSpan): AsyncGenerator<unknown> {
  const chunks: JsonObject[] = [];
  let complete = false;
  try {
    for await (const chunk of { [Symbol.asyncIterator]: () => source }) {
      if (isObject(chunk)) chunks.push(chunk);
      yield chunk;
    }
    complete = true;
  } catch (err) {
    call.fail(err, () => (chunks.length > 0 ? assembleStream(chunks) : null));
    throw err;
  } finally {
    // Also reached when the caller breaks out of its loop (return() at a yield).
    if (!call.isEnded) call.succeed(() => assembleStream(chunks), complete ? {} : { [STREAM_ENDED_EARLY_ATTRIBUTE]: true });
  }
}
