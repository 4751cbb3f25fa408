/**
 * Emitters: rewards, annotations, messages, objects and exceptions as spans (names and attributes of
 * each: docs/tracing.md#span-names-attributes-and-emitters).
 * With `propagate` (the default) the span goes through the active tracer into the current rollout;
 * without it a DummyTracer only builds the span locally (the active tracer is not even consulted).
 */
import type { Attributes, Span, SpanCoreFields } from "../types/index.ts";
import {
  AGL_ANNOTATION,
  AGL_EXCEPTION,
  AGL_MESSAGE,
  AGL_OBJECT,
  LightningSpanAttributes as A,
  LightningError,
  ValidationError,
} from "../types/index.ts";
import { checkAttributesSanity, flatten, formatExceptionAttributes, isPlainObject, sanitizeAttributes } from "./attributes.ts";
import { DummyTracer, isPromiseLike, requireActiveTracer, type CreateSpanOptions, type Tracer } from "./base.ts";
import { logEmitted } from "./emit-debug.ts";
import { getLogger } from "../platform/log.ts";

export interface EmitOptions {
  /** Send the span to the active tracer (default true); false builds it locally only. */
  propagate?: boolean;
}

export interface EmitWithAttributesOptions extends EmitOptions {
  /** Extra attributes, flattened and sanitized. */
  attributes?: Record<string, unknown>;
}

export interface EmitRewardOptions extends EmitWithAttributesOptions {
  /** With named dimensions: which one is the primary reward (it goes first). */
  primaryKey?: string;
}

const log = getLogger("agentlightning.emitter");
const localTracer = new DummyTracer();

/** The span made by the active tracer (or locally for `propagate: false`), logged when AGL_EMITTER_DEBUG says so. */
function emitSpan(name: string, options: CreateSpanOptions, propagate: boolean | undefined): SpanCoreFields {
  const tracer: Tracer = propagate === false ? localTracer : requireActiveTracer();
  const span = tracer.createSpan(name, options);
  logEmitted(span, tracer, propagate !== false);
  return span;
}

const OK = { status_code: "OK" as const, description: null };

function extraAttributes(attributes: Record<string, unknown> | undefined): Attributes {
  return attributes ? sanitizeAttributes(flatten(attributes)) : {};
}

function rewardNumber(v: unknown, what: string): number {
  if (typeof v === "number") return v;
  if (typeof v === "boolean") return v ? 1 : 0;
  throw new ValidationError(`${what} must be a number or a boolean, got ${v === null ? "null" : typeof v}`);
}

/**
 * A reward as an annotation span: `agentlightning.reward.<i>.name` / `.value`, the primary reward at
 * index 0. A scalar is the dimension "primary"; named dimensions need `primaryKey`.
 */
export function emitReward(reward: number | boolean | Record<string, number | boolean>, options: EmitRewardOptions = {}): SpanCoreFields {
  let dims: { name: string; value: number }[];
  if (typeof reward === "number" || typeof reward === "boolean") {
    dims = [{ name: "primary", value: rewardNumber(reward, "reward") }];
  } else if (isPlainObject(reward)) {
    const entries = Object.entries(reward).map(([name, v]) => ({ name, value: rewardNumber(v, `reward '${name}'`) }));
    const key = options.primaryKey;
    if (key === undefined || key === null)
      throw new ValidationError("primaryKey is required when the reward has named dimensions", ["primaryKey"]);
    const primary = entries.find((d) => d.name === key);
    if (!primary) throw new ValidationError(`primaryKey '${key}' is not one of the reward dimensions`, ["primaryKey"]);
    dims = [primary, ...entries.filter((d) => d !== primary)];
  } else {
    throw new TypeError(
      `reward must be a number, a boolean or an object of named numbers, got ${reward === null ? "null" : typeof reward}`,
    );
  }
  return emitAnnotation({ [A.REWARD]: dims, ...(options.attributes ?? {}) }, options);
}

/** What a function wrapped by `reward` returns (or resolves to): one number, or none. */
type RewardValue = number | boolean | null | undefined;

/**
 * Upstream's `@reward` decorator: `fn` wrapped so that what it returns (or what its promise resolves to)
 * is emitted as the reward of the active trace (`emitReward`) and then returned. A sync `fn` stays sync;
 * when `fn` throws, nothing is emitted and the error goes on. As upstream's decorator under its default
 * (AgentOps) tracer, a value that is not a number or a boolean emits no reward: null and undefined
 * quietly, anything else with a warning.
 *
 *   const accuracy = reward((answer: string, expected: string) => (answer === expected ? 1 : 0));
 */
export function reward<A extends unknown[], R extends RewardValue | Promise<RewardValue>, T = unknown>(
  fn: (this: T, ...args: A) => R,
): (this: T, ...args: A) => R {
  return function rewarded(this: T, ...args: A): R {
    const result = fn.apply(this, args);
    if (!isPromiseLike(result)) {
      emitReturnedReward(result);
      return result;
    }
    return Promise.resolve(result).then((value) => {
      emitReturnedReward(value);
      return value;
    }) as R;
  };
}

function emitReturnedReward(value: unknown): void {
  if (typeof value === "number" || typeof value === "boolean") emitReward(value);
  else if (value !== null && value !== undefined) log.warning(`Reward is ignored because it is not a number: ${String(value)}`);
}

/** Any flat-able annotation (tags, links, metadata) as an `agentlightning.annotation` span. */
export function emitAnnotation(annotation: Record<string, unknown>, options: EmitOptions = {}): SpanCoreFields {
  const flat = flatten(annotation);
  checkAttributesSanity(flat);
  return emitSpan(AGL_ANNOTATION, { attributes: sanitizeAttributes(flat), status: OK }, options.propagate);
}

/** A free-text message span. */
export function emitMessage(message: string, options: EmitWithAttributesOptions = {}): SpanCoreFields {
  if (typeof message !== "string") throw new TypeError(`message must be a string, got ${typeof message}`);
  return emitSpan(AGL_MESSAGE, { attributes: { [A.MESSAGE_BODY]: message, ...extraAttributes(options.attributes) } }, options.propagate);
}

/** Python's `str()` of a primitive, so traces read the same from both sides. */
function pythonLiteral(v: string | number | boolean): string {
  if (typeof v === "boolean") return v ? "True" : "False";
  if (typeof v === "number" && Number.isInteger(v)) return String(v);
  if (typeof v === "number") return String(v);
  return v;
}

function objectTypeName(obj: unknown): string {
  if (obj === null || obj === undefined) return "NoneType";
  if (Array.isArray(obj)) return "list";
  if (isPlainObject(obj)) return "dict";
  return (obj as object).constructor?.name ?? "object";
}

function toBase64(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s);
}

/** Any value as a span: primitives and bytes as literals, everything else as JSON. */
export function emitObject(obj: unknown, options: EmitWithAttributesOptions = {}): SpanCoreFields {
  let attrs: Attributes;
  if (typeof obj === "string" || typeof obj === "number" || typeof obj === "boolean") {
    const type = typeof obj === "string" ? "str" : typeof obj === "boolean" ? "bool" : Number.isInteger(obj) ? "int" : "float";
    attrs = { [A.OBJECT_TYPE]: type, [A.OBJECT_LITERAL]: pythonLiteral(obj) };
  } else if (obj instanceof Uint8Array) {
    attrs = { [A.OBJECT_TYPE]: "bytes", [A.OBJECT_LITERAL]: toBase64(obj) };
  } else {
    let json: string | undefined;
    try {
      json = JSON.stringify(obj === undefined ? null : obj);
    } catch (err) {
      throw new LightningError(`Object must be JSON serializable: ${String(err)}`);
    }
    attrs = { [A.OBJECT_TYPE]: objectTypeName(obj), [A.OBJECT_JSON]: json ?? "null" };
  }
  return emitSpan(AGL_OBJECT, { attributes: { ...attrs, ...extraAttributes(options.attributes) }, status: OK }, options.propagate);
}

/** A recorded exception; the span itself succeeded, so its status is OK. */
export function emitException(error: unknown, options: EmitWithAttributesOptions = {}): SpanCoreFields {
  if (!(error instanceof Error)) throw new TypeError(`emitException needs an Error, got ${error === null ? "null" : typeof error}`);
  return emitSpan(
    AGL_EXCEPTION,
    { attributes: { ...formatExceptionAttributes(error), ...extraAttributes(options.attributes) }, status: OK },
    options.propagate,
  );
}

/** The body of a message span, or null. */
export function getMessageValue(span: Pick<Span, "attributes">): string | null {
  const v = span.attributes[A.MESSAGE_BODY];
  if (v === undefined) return null;
  if (typeof v !== "string") throw new TypeError(`${A.MESSAGE_BODY} must be a string`);
  return v;
}

/** Decodes an object span; null when it has neither a JSON nor a literal value. */
export function getObjectValue(span: Pick<Span, "attributes">): unknown {
  const json = span.attributes[A.OBJECT_JSON];
  if (json !== undefined) {
    try {
      return JSON.parse(String(json));
    } catch (err) {
      throw new LightningError(`Invalid JSON in ${A.OBJECT_JSON}: ${String(err)}`);
    }
  }
  const literal = span.attributes[A.OBJECT_LITERAL];
  if (literal === undefined) return null;
  const type = span.attributes[A.OBJECT_TYPE] ?? "str";
  const s = String(literal);
  switch (type) {
    case "str":
      return s;
    case "int":
      return Number.parseInt(s, 10);
    case "float":
      return Number.parseFloat(s);
    case "bool":
      return s.toLowerCase() === "true";
    case "bytes":
      return Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
    default:
      throw new LightningError(`Unknown object type '${String(type)}' for a literal value`);
  }
}
