/**
 * Caller data in the store: a `"__proto__"` key is an ordinary key (kept, byte for byte, in the memory
 * store and in a libSQL file read back after reopening), and data nested deeper than MAX_JSON_DEPTH is a
 * ValidationError (never a stack overflow), with nothing stored.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { LightningStore, OtelReadableSpanLike } from "../../src/store/base.ts";
import { spanFromOpenTelemetry } from "../../src/store/otel-span.ts";
import { LibsqlLightningStore } from "../../src/store/libsql/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { MAX_JSON_DEPTH, ownedCopy } from "../../src/store/owned.ts";
import { ValidationError, type Span } from "../../src/types/index.ts";
import { PROTO_INPUT, PROTO_METADATA, PROTO_STATS, expectSameJsonFields, nested, protoSpanText } from "./proto-json.ts";

describe("ownedCopy", () => {
  it('keeps "__proto__" as an own key of the frozen copy, leaves the prototype alone, and JSON.stringify writes it', () => {
    const copy = ownedCopy(JSON.parse(PROTO_INPUT)) as Record<string, unknown>;
    expect(JSON.stringify(copy)).toBe(PROTO_INPUT);
    expect(Object.getPrototypeOf(copy)).toBe(Object.prototype);
    expect(Object.hasOwn(copy, "__proto__")).toBe(true);
    expect(Object.isFrozen(copy) && Object.isFrozen(copy["__proto__"])).toBe(true);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it(`copies ${MAX_JSON_DEPTH} levels and refuses ${MAX_JSON_DEPTH + 1} (or 100,000) with a ValidationError, not a stack overflow`, () => {
    expect(JSON.stringify(ownedCopy(nested(MAX_JSON_DEPTH)))).toBe("[".repeat(MAX_JSON_DEPTH) + "0" + "]".repeat(MAX_JSON_DEPTH));
    for (const levels of [MAX_JSON_DEPTH + 1, 100_000]) {
      const err = (() => {
        try {
          ownedCopy(nested(levels), "input");
          return null;
        } catch (e) {
          return e;
        }
      })();
      expect(err).toBeInstanceOf(ValidationError);
      expect((err as Error).message).toMatch(new RegExp(`input is nested more than ${MAX_JSON_DEPTH} levels deep`));
    }
    // Objects count as well as arrays.
    let deep: unknown = 1;
    for (let i = 0; i < MAX_JSON_DEPTH + 1; i++) deep = { k: deep };
    expect(() => ownedCopy(deep)).toThrow(ValidationError);
  });
});

describe("spanFromOpenTelemetry", () => {
  it('keeps an attribute and a trace state key named "__proto__"', () => {
    const otel: OtelReadableSpanLike = {
      name: "s",
      spanContext: () => ({ traceId: "a".repeat(32), spanId: "b".repeat(16), traceState: { serialize: () => "__proto__=v,k=w" } }),
      status: { code: 0 },
      attributes: JSON.parse('{"__proto__":"attr","n":[1,2]}') as Record<string, unknown>,
      events: [{ name: "e", attributes: JSON.parse('{"__proto__":1}') as Record<string, unknown>, time: [1, 0] }],
      links: [],
      startTime: [1, 0],
      endTime: [2, 0],
      resource: { attributes: JSON.parse('{"__proto__":"r"}') as Record<string, unknown> },
    };
    const span = spanFromOpenTelemetry(otel, "ro-1", "at-1", 1);
    expect(JSON.stringify(span.attributes)).toBe('{"__proto__":"attr","n":[1,2]}');
    expect(JSON.stringify(span.events[0]!.attributes)).toBe('{"__proto__":1}');
    expect(JSON.stringify(span.resource.attributes)).toBe('{"__proto__":"r"}');
    expect(JSON.stringify(span.context!.trace_state)).toBe('{"__proto__":"v","k":"w"}');
  });
});

const dir = mkdtempSync(join(tmpdir(), "json-keys-depth-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Backend {
  name: string;
  open(): Promise<LightningStore>;
  /** The store to read back from: the libSQL file is closed and opened again, so rows come from the database. */
  reopen(store: LightningStore): Promise<LightningStore>;
}

let fileNo = 0;
const BACKENDS: Backend[] = [
  { name: "memory", open: async () => new InMemoryLightningStore(), reopen: async (s) => s },
  {
    name: "libSQL file",
    open: () => LibsqlLightningStore.open(`file:${join(dir, `store-${++fileNo}.db`)}`),
    reopen: async (s) => {
      await s.close();
      return LibsqlLightningStore.open(`file:${join(dir, `store-${fileNo}.db`)}`);
    },
  },
];

describe.each(BACKENDS)("$name store", (backend) => {
  it('keeps "__proto__" keys in inputs, metadata, spans, resources and heartbeat stats, byte for byte', async () => {
    let store = await backend.open();
    const r = await store.startRollout(JSON.parse(PROTO_INPUT), { metadata: JSON.parse(PROTO_METADATA) });
    const q = await store.enqueueRollout(JSON.parse(PROTO_INPUT));
    await store.updateRollout(q.rollout_id, { metadata: JSON.parse(PROTO_METADATA) });
    await store.updateAttempt(r.rollout_id, r.attempt.attempt_id, { metadata: JSON.parse(PROTO_METADATA) });
    const aid = r.attempt.attempt_id;
    const complete = protoSpanText(r.rollout_id, aid, 1, "b".repeat(16), true);
    const incomplete = protoSpanText(r.rollout_id, aid, 2, "c".repeat(16), false);
    await store.addSpan(JSON.parse(complete) as Span);
    await store.addManySpans([JSON.parse(incomplete) as Span]);
    const resourcesText =
      '{"__proto__":{"resource_type":"llm","endpoint":"http://x","model":"m","api_key":null,"sampling_parameters":{"__proto__":0.5}}}';
    const res = await store.addResources(JSON.parse(resourcesText));
    await store.updateWorker("w1", JSON.parse(PROTO_STATS));

    store = await backend.reopen(store);
    try {
      const rollout = (await store.getRolloutById(r.rollout_id))!;
      expect(JSON.stringify(rollout.input)).toBe(PROTO_INPUT);
      expect(JSON.stringify(rollout.metadata)).toBe(PROTO_METADATA);
      expect(JSON.stringify((await store.getRolloutById(q.rollout_id))!.metadata)).toBe(PROTO_METADATA);
      expect(JSON.stringify((await store.getLatestAttempt(r.rollout_id))!.metadata)).toBe(PROTO_METADATA);
      const spans = (await store.querySpans(r.rollout_id)).items;
      expect(spans).toHaveLength(2);
      expectSameJsonFields(spans[0]!, JSON.parse(complete));
      const { status: _, ...rest } = JSON.parse(incomplete) as Record<string, unknown>;
      // The filled description comes before the extra key, as it does for an extra key of any other name.
      expectSameJsonFields(spans[1]!, rest, { status: '{"status_code":"OK","description":null,"__proto__":"s"}' });
      expect(JSON.stringify((await store.getResourcesById(res.resources_id))!.resources)).toBe(resourcesText);
      expect(JSON.stringify((await store.getWorkerById("w1"))!.heartbeat_stats)).toBe(PROTO_STATS);
      // Nothing reached Object.prototype on the way.
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    } finally {
      await store.close();
    }
  });

  it("refuses data nested too deep with a ValidationError and stores nothing", async () => {
    const store = await backend.open();
    try {
      const r = await store.startRollout(1);
      const aid = r.attempt.attempt_id;
      const deep = nested(MAX_JSON_DEPTH + 1);
      const before = JSON.stringify([
        await store.queryRollouts(),
        await store.queryAttempts(r.rollout_id),
        await store.querySpans(r.rollout_id),
      ]);
      const span = { ...(JSON.parse(protoSpanText(r.rollout_id, aid, 1, "d".repeat(16), true)) as Span), deep };
      const calls: [string, () => Promise<unknown>][] = [
        ["startRollout input", () => store.startRollout(deep)],
        ["enqueueRollout metadata", () => store.enqueueRollout(1, { metadata: { deep } })],
        ["updateRollout input", () => store.updateRollout(r.rollout_id, { input: deep })],
        ["updateAttempt metadata", () => store.updateAttempt(r.rollout_id, aid, { metadata: { deep } })],
        ["addSpan extra key", () => store.addSpan(span)],
        ["addManySpans extra key", () => store.addManySpans([span])],
        ["updateWorker stats", () => store.updateWorker("w2", { deep })],
      ];
      for (const [what, call] of calls) {
        await expect(call(), what).rejects.toThrow(ValidationError);
        await expect(call(), what).rejects.toThrow(/nested more than 512 levels deep/);
      }
      expect(
        JSON.stringify([await store.queryRollouts(), await store.queryAttempts(r.rollout_id), await store.querySpans(r.rollout_id)]),
      ).toBe(before);
      expect(await store.getWorkerById("w2")).toBeNull();
    } finally {
      await store.close();
    }
  });
});

describe('"__proto__" is validated like any other key', () => {
  /** The issues (path and message) of what `call` throws, with `name` in the paths written as `<key>`. */
  const issuesOf = async (call: () => Promise<unknown>, name: string): Promise<string[]> => {
    const err = await call().then(
      () => null,
      (e: unknown) => e,
    );
    expect(err, name).toBeInstanceOf(ValidationError);
    return (err as ValidationError).issues.map((i) => `${i.path.map((p) => (p === name ? "<key>" : p)).join(".")}: ${i.message}`);
  };
  /** JSON text of `{ [name]: value }`: an object literal or JSON.stringify cannot write a "__proto__" key. */
  const keyed = (name: string, value: unknown): Record<string, unknown> => JSON.parse(`{${JSON.stringify(name)}:${JSON.stringify(value)}}`);

  it("a resource named __proto__ with an invalid value is refused with the same issues as any other name, and nothing is stored", async () => {
    const store = new InMemoryLightningStore();
    try {
      const bad = { resource_type: "llm", endpoint: 5 };
      const other = await issuesOf(() => store.addResources(keyed("x", bad) as never), "x");
      expect(other.length).toBeGreaterThan(0);
      expect(await issuesOf(() => store.addResources(keyed("__proto__", bad) as never), "__proto__")).toEqual(other);
      expect((await store.queryResources()).total).toBe(0);
      const ok = await store.addResources({ x: { resource_type: "prompt_template", template: "t", engine: "f-string" } });
      const update = () => store.updateResources(ok.resources_id, keyed("__proto__", bad) as never);
      expect(await issuesOf(update, "__proto__")).toEqual(other);
      expect((await store.getResourcesById(ok.resources_id))!.resources).toEqual(ok.resources);
    } finally {
      await store.close();
    }
  });

  it("a valid resource named __proto__ gets its defaults filled like any other, and stays an own key", async () => {
    const store = new InMemoryLightningStore();
    try {
      const llm = { resource_type: "llm", endpoint: "http://x", model: "m" };
      const other = await store.addResources(keyed("x", llm) as never);
      const proto = await store.addResources(keyed("__proto__", llm) as never);
      expect(Object.keys(proto.resources)).toEqual(["__proto__"]);
      expect(Object.getPrototypeOf(proto.resources)).toBe(Object.prototype);
      expect(JSON.stringify(Object.values(proto.resources)[0])).toBe(JSON.stringify(other.resources.x));
    } finally {
      await store.close();
    }
  });

  it("a span attribute, event attribute, resource attribute or trace state key __proto__ with an invalid value is refused like any other", async () => {
    const store = new InMemoryLightningStore();
    try {
      const r = await store.startRollout(1);
      const base = JSON.parse(protoSpanText(r.rollout_id, r.attempt.attempt_id, 1, "e".repeat(16), true)) as Record<string, unknown>;
      const ctx = base.context as Record<string, unknown>;
      const invalid: [string, (name: string) => Record<string, unknown>][] = [
        ["attributes", (name) => ({ ...base, attributes: keyed(name, { nested: 1 }) })],
        ["event attributes", (name) => ({ ...base, events: [{ name: "e", attributes: keyed(name, [1, "mixed"]), timestamp: 1 }] })],
        ["resource attributes", (name) => ({ ...base, resource: { attributes: keyed(name, null), schema_url: "" } })],
        ["trace state", (name) => ({ ...base, context: { ...ctx, trace_state: keyed(name, 1) } })],
      ];
      for (const [what, span] of invalid) {
        const other = await issuesOf(() => store.addSpan(span("x") as unknown as Span), "x");
        expect(other.length, what).toBeGreaterThan(0);
        expect(await issuesOf(() => store.addSpan(span("__proto__") as unknown as Span), "__proto__"), what).toEqual(other);
        expect(await issuesOf(() => store.addManySpans([span("__proto__") as unknown as Span]), "__proto__"), what).toEqual(
          await issuesOf(() => store.addManySpans([span("x") as unknown as Span]), "x"),
        );
      }
      expect((await store.querySpans(r.rollout_id)).items).toEqual([]);
    } finally {
      await store.close();
    }
  });
});
