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
