/**
 * Writing span attributes (docs/tracing.md#span-names-attributes-and-emitters): flatten nested values into dotted keys, sanitize them
 * into OpenTelemetry attribute values, tags, links and exception attributes. Readers (unflatten,
 * filterAndUnflatten) live in src/types/attributes.ts.
 */
import type { AttributeValue, Attributes, Span } from "../types/index.ts";
import { ExceptionAttributes, LinkAttributes, LightningSpanAttributes, ValidationError } from "../types/index.ts";
import { getLogger } from "../platform/log.ts";
import { setOwn } from "../types/own-keys.ts";

const log = getLogger("agentlightning.utils.otel");

type PrimitiveKind = "bool" | "int" | "float" | "str";

/** Python's four primitive kinds; JS cannot tell `2.0` from `2`, so integral numbers count as int. */
function primitiveKind(v: unknown): PrimitiveKind | null {
  switch (typeof v) {
    case "boolean":
      return "bool";
    case "number":
      return Number.isInteger(v) ? "int" : "float";
    case "string":
      return "str";
    default:
      return null;
  }
}

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/**
 * Nested dicts and lists to one flat map with dotted keys. A non-empty list of primitives of one kind
 * stays a leaf list unless `expandLeafLists`; empty lists and dicts contribute no key.
 */
export function flatten(data: unknown, expandLeafLists = false): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  walk(data, "", out, expandLeafLists);
  return out;
}

const join = (prefix: string, key: string): string => (prefix === "" ? key : `${prefix}.${key}`);

function walk(v: unknown, prefix: string, out: Record<string, unknown>, expand: boolean): void {
  if (Array.isArray(v)) {
    if (v.length === 0) return;
    if (!expand && prefix !== "") {
      const kinds = new Set(v.map(primitiveKind));
      if (!kinds.has(null)) {
        if (kinds.size === 1) {
          setOwn(out, prefix, [...v]);
          return;
        }
        log.warn(`List at '${prefix}' has mixed primitive types (${[...kinds].join(", ")}); expanding it into indexed keys`);
      }
    }
    v.forEach((item, i) => walk(item, join(prefix, String(i)), out, expand));
    return;
  }
  if (v instanceof Map) {
    for (const [k, item] of v) {
      if (typeof k !== "string") {
        throw new ValidationError(`Only string keys are supported in dictionaries, got key ${String(k)} of type ${typeof k}`, [prefix]);
      }
      walk(item, join(prefix, k), out, expand);
    }
    return;
  }
  if (isPlainObject(v)) {
    for (const k of Object.keys(v)) walk(v[k], join(prefix, k), out, expand);
    return;
  }
  setOwn(out, prefix, v);
}

function jsonOrString(v: unknown, force: boolean): string {
  try {
    const s = JSON.stringify(v, (_k, x: unknown) => (typeof x === "bigint" ? x.toString() : x));
    if (s !== undefined) return s;
  } catch (err) {
    if (!force) throw new ValidationError(`Value is not JSON serializable: ${String(err)}`);
  }
  if (!force) throw new ValidationError(`Value of type ${typeof v} is not JSON serializable`);
  return String(v);
}

/** One value as an OpenTelemetry attribute value; anything that is not a primitive (list) becomes JSON. */
export function sanitizeValue(v: unknown, force = true): AttributeValue {
  if (typeof v === "string" || typeof v === "boolean" || typeof v === "number") return v;
  if (Array.isArray(v)) {
    if (v.every((x) => typeof x === "string")) return [...v] as string[];
    if (v.every((x) => typeof x === "boolean")) return [...v] as boolean[];
    if (v.every((x) => typeof x === "number" || typeof x === "boolean")) return v.map((x) => Number(x));
    log.warn(`Failed to sanitize list attribute; storing it as JSON`);
    return jsonOrString(v, force);
  }
  return jsonOrString(v, force);
}

export function sanitizeAttributes(attrs: Record<string, unknown>, force = true): Attributes {
  const out: Attributes = {};
  for (const [k, v] of Object.entries(attrs)) setOwn(out, k, sanitizeValue(v, force));
  return out;
}

/** Values must be primitives or homogeneous primitive lists (null rejected). */
export function checkAttributesSanity(attrs: Record<string, unknown>): void {
  for (const [k, v] of Object.entries(attrs)) {
    if (typeof v === "string" || typeof v === "boolean" || typeof v === "number") continue;
    if (Array.isArray(v)) {
      const kinds = new Set(v.map((x) => (typeof x === "number" ? "number" : primitiveKind(x))));
      if (!kinds.has(null) && kinds.size <= 1) continue;
      throw new ValidationError(`Attribute '${k}' must be a list of one primitive type`, [k]);
    }
    throw new ValidationError(`Attribute '${k}' must be a primitive or a list of primitives, got ${v === null ? "null" : typeof v}`, [k]);
  }
}

/** `agentlightning.tag.<i>` = tag. */
export function makeTagAttributes(tags: readonly string[]): Attributes {
  return flatten({ [LightningSpanAttributes.TAG]: [...tags] }, true) as Attributes;
}

/** `agentlightning.link.<i>.key_match` / `.value_match`. */
export function makeLinkAttributes(links: Record<string, string>): Attributes {
  const out: Attributes = {};
  Object.entries(links).forEach(([key, value], i) => {
    if (typeof value !== "string") throw new ValidationError(`Link value for '${key}' must be a string`, [key]);
    out[`${LightningSpanAttributes.LINK}.${i}.${LinkAttributes.KEY_MATCH}`] = key;
    out[`${LightningSpanAttributes.LINK}.${i}.${LinkAttributes.VALUE_MATCH}`] = value;
  });
  return out;
}

/** Spans matching every link: `trace_id` / `span_id` against the span's ids, other keys against its attributes. */
export function queryLinkedSpans(spans: readonly Span[], links: readonly { key_match: string; value_match: string }[]): Span[] {
  return spans.filter((s) =>
    links.every((l) => {
      if (l.key_match === "trace_id") return s.trace_id === l.value_match;
      if (l.key_match === "span_id") return s.span_id === l.value_match;
      return s.attributes[l.key_match] === l.value_match;
    }),
  );
}

export function exceptionTypeName(e: unknown): string {
  if (e instanceof Error) return e.name && e.name !== "Error" ? e.name : (e.constructor?.name ?? "Error");
  return typeof e;
}

/** OpenTelemetry exception attributes; the stack trace only when not blank. */
export function formatExceptionAttributes(e: unknown): Attributes {
  const type = exceptionTypeName(e);
  const message = e instanceof Error ? e.message : String(e);
  const out: Attributes = {
    [ExceptionAttributes.TYPE]: type,
    [ExceptionAttributes.MESSAGE]: message,
    [ExceptionAttributes.ESCAPED]: true,
  };
  const stack = e instanceof Error ? e.stack : undefined;
  if (stack && stack.trim() !== "") {
    // V8 stacks start with "Name: message"; other engines give frames only.
    out[ExceptionAttributes.STACKTRACE] = stack.startsWith(`${type}: ${message}`) ? stack : `${type}: ${message}\n${stack}`;
  }
  return out;
}
