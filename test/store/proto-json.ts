/** Test data for `"__proto__"` keys and deep nesting, shared by the store and server tests. */
import { expect } from "vitest";

/** JSON texts with `__proto__` keys: JSON.parse makes them own keys, as a server or a client does. */
export const PROTO_INPUT = '{"__proto__":{"polluted":true},"task":{"__proto__":"text","n":[1,{"__proto__":null}]}}';
export const PROTO_METADATA = '{"__proto__":{"m":1},"tag":"x"}';
export const PROTO_STATS = '{"__proto__":{"cpu":0.5}}';
/** Span parts: attributes, trace_state and extra keys on the span, its status, an event and a link. */
export function protoSpanText(rolloutId: string, attemptId: string, sequenceId: number, spanId: string, complete: boolean): string {
  const ctx = `{"trace_id":"${"a".repeat(32)}","span_id":"${spanId}","is_remote":false,"trace_state":{"__proto__":"vendor"}}`;
  return (
    `{"rollout_id":"${rolloutId}","attempt_id":"${attemptId}","sequence_id":${sequenceId},"trace_id":"${"a".repeat(32)}","span_id":"${spanId}",` +
    // Without a status description the span is incomplete: it goes through the zod schema, which fills it.
    `"parent_id":null,"name":"proto","status":{"status_code":"OK",${complete ? '"description":null,' : ""}"__proto__":"s"},` +
    `"attributes":{"__proto__":"attr","x":1},"events":[{"name":"e","attributes":{"__proto__":true},"timestamp":1}],"links":[{"context":${ctx},"attributes":{"__proto__":[1,2]}}],"start_time":1,"end_time":2,"context":${ctx},"parent":null,` +
    `"resource":{"attributes":{"__proto__":"r"},"schema_url":""},"__proto__":{"extra":[{"__proto__":1}]}}`
  );
}

/** Each top-level field of `actual` written as JSON equals the same field of `sent` (and no field is missing or added). */
export function expectSameJsonFields(actual: object, sent: Record<string, unknown>, filled: Record<string, string> = {}): void {
  const a = actual as Record<string, unknown>;
  expect(Object.keys(a).sort()).toEqual([...new Set([...Object.keys(sent), ...Object.keys(filled)])].sort());
  for (const k of Object.keys(sent)) expect(JSON.stringify(a[k]), k).toBe(JSON.stringify(sent[k]));
  for (const [k, text] of Object.entries(filled)) expect(JSON.stringify(a[k]), k).toBe(text);
}

/** `[[...[0]...]]` with `levels` arrays. */
export const nested = (levels: number): unknown => JSON.parse("[".repeat(levels) + "0" + "]".repeat(levels));

/** The keys that reach a prototype when an object is built naively from untrusted keys. */
export const PROTOTYPE_KEYS = ["__proto__", "constructor", "prototype"] as const;

/** Every place a prototype-naming segment `k` can sit in a dotted attribute key. */
export const shapesFor = (k: string): string[] => [
  k,
  `${k}.x`,
  `a.${k}`,
  `a.${k}.x`,
  `a.b.${k}`,
  `${k}.${k}.x`,
  `a.${k}.constructor.prototype.x`,
  `a.constructor.prototype.${k}`,
  `0.${k}`,
  `0.${k}.x`,
];

/** The JSON text one dotted key unflattens to: each segment an object key, the index 0 a one-item list. */
export const nestedText = (key: string, value: unknown): string =>
  key.split(".").reduceRight((inner, part) => (part === "0" ? `[${inner}]` : `{${JSON.stringify(part)}:${inner}}`), JSON.stringify(value));

const PROTOTYPES: readonly [string, object][] = [
  ["Object.prototype", Object.prototype],
  ["Array.prototype", Array.prototype],
  ["Function.prototype", Function.prototype],
];

/** The own properties of the prototypes every object, array and function inherits from, to compare and restore. */
export function snapshotPrototypes(): Map<object, Map<PropertyKey, PropertyDescriptor>> {
  return new Map(
    PROTOTYPES.map(([, p]) => [p, new Map(Reflect.ownKeys(p).map((k) => [k, Object.getOwnPropertyDescriptor(p, k)!]))] as const),
  );
}

/** What was added to or changed on those prototypes since `before` (`Object.prototype.polluted`, ...); [] when nothing. */
export function prototypeChanges(before: ReturnType<typeof snapshotPrototypes>): string[] {
  const changes: string[] = [];
  for (const [name, p] of PROTOTYPES) {
    const was = before.get(p)!;
    for (const k of Reflect.ownKeys(p)) {
      const d = Object.getOwnPropertyDescriptor(p, k)!;
      const old = was.get(k);
      if (!old || !Object.is(old.value, d.value) || old.get !== d.get || old.set !== d.set) changes.push(`${name}.${String(k)}`);
    }
  }
  return changes;
}

/** Puts those prototypes back as they were in `before`, so that one polluting failure does not break the tests after it. */
export function restorePrototypes(before: ReturnType<typeof snapshotPrototypes>): void {
  for (const [, p] of PROTOTYPES) {
    const was = before.get(p)!;
    for (const k of Reflect.ownKeys(p)) if (!was.has(k)) delete (p as Record<PropertyKey, unknown>)[k];
    for (const [k, d] of was) Object.defineProperty(p, k, d);
  }
}
