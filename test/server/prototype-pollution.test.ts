/**
 * Keys that name a prototype (`__proto__`, `constructor`, `prototype`) at every position of span
 * attributes (JSON, OTLP/JSON, OTLP protobuf), resources, rollout inputs, metadata and heartbeat stats,
 * stored over HTTP through the real app, then read back by every route that turns them into objects
 * (spans, rollouts, resources, workers, the dashboard's triplets with both adapters, statistics, metrics)
 * and by the adapters and the dashboard's span reader in this process. The server stays healthy, no
 * prototype of this process changes, and the keys come back as ordinary data.
 */
import { fromJson, toBinary } from "@bufbuild/protobuf";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { LlmProxyTraceToTriplet, TraceToMessages, TraceTripletAdapter, getRewardValue, type Triplet } from "../../src/adapter/index.ts";
// @ts-expect-error: plain browser ES module without type declarations
import { llmCall, rewardValues } from "../../src/server/dashboard/web/spans.js";
import { ExportTraceServiceRequestSchema } from "../../src/server/otlp/schema.ts";
import type { LightningStore } from "../../src/store/base.ts";
import { LibsqlLightningStore } from "../../src/store/libsql/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { ValidationError, type Span } from "../../src/types/index.ts";
import { PROTOTYPE_KEYS, nestedText, prototypeChanges, restorePrototypes, shapesFor, snapshotPrototypes } from "../store/proto-json.ts";
import { startInProcess, type InProcessServer } from "./in-process.ts";

const SHAPES = PROTOTYPE_KEYS.flatMap(shapesFor);
const VALUES: unknown[] = [1, "s", [1, 2]];
const CASES = SHAPES.flatMap((shape) => VALUES.map((value) => ({ shape, value })));

/** JSON text of an object with these keys in this order (an object literal cannot hold an own "__proto__"). */
const objText = (entries: [string, unknown][]): string => `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(",")}}`;
/** An object with these own keys, as JSON.parse makes it: JSON.stringify writes it back key for key. */
const obj = (entries: [string, unknown][]): Record<string, unknown> => JSON.parse(objText(entries.map(([k, v]) => [k, JSON.stringify(v)])));

/** JSON (texts) with prototype-naming keys at the top and nested, for inputs, metadata and stats. */
const DATA_TEXT = objText([
  ["__proto__", objText([["polluted", "1"]])],
  ["constructor", objText([["prototype", objText([["polluted", "1"]])]])],
  ["prototype", objText([["__proto__", "[1,2]"]])],
  ["kind", '"grpo-metrics"'],
  ["list", `[${objText([["__proto__", objText([["polluted", "true"]])]])}]`],
]);

const dir = mkdtempSync(join(tmpdir(), "prototype-pollution-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let fileNo = 0;
const BACKENDS: [string, () => Promise<LightningStore>][] = [
  ["memory", async () => new InMemoryLightningStore({ scanDebounceSeconds: 0 })],
  ["libSQL file", () => LibsqlLightningStore.open(`file:${join(dir, `store-${++fileNo}.db`)}`)],
];

describe.each(BACKENDS)("%s store over HTTP", (_name, open) => {
  let store: LightningStore;
  let server: InProcessServer;
  let before: ReturnType<typeof snapshotPrototypes>;

  beforeEach(async () => {
    before = snapshotPrototypes();
    store = await open();
    server = await startInProcess(store);
  });
  afterEach(async () => {
    const changes = prototypeChanges(before);
    // A polluted prototype would break every test after this one: put it back, then fail.
    restorePrototypes(before);
    await server.close();
    await store.close();
    expect(changes, "prototypes changed").toEqual([]);
  });

  const call = async (method: string, path: string, body?: string, type = "application/json") => {
    const res = await fetch(server.url + path, {
      method,
      headers: body === undefined ? {} : { "content-type": type },
      body,
    });
    const text = await res.text();
    return { status: res.status, text, json: () => JSON.parse(text) };
  };
  const agl = (method: string, path: string, body?: string) => call(method, `/v1/agl${path}`, body);
  const get = async (path: string) => {
    const r = await agl("GET", path);
    expect(r.status, `GET ${path}: ${r.text.slice(0, 300)}`).toBe(200);
    return r.json();
  };

  /** The server answers, and nothing reached a prototype of this process. */
  const expectHealthy = async (when: string) => {
    for (const path of ["/v1/agl/health", "/v1/agl/statistics", "/v1/agl/rollouts?limit=1", "/v1/agl/server", "/metrics"]) {
      expect((await call("GET", path)).status, `GET ${path} ${when}`).toBe(200);
    }
    expect(prototypeChanges(before), `prototypes changed ${when}`).toEqual([]);
  };

  const newRollout = async (): Promise<{ rid: string; aid: string }> => {
    const r = await agl("POST", "/rollouts", '{"input":null}');
    expect(r.status).toBe(201);
    return { rid: r.json().rollout_id, aid: r.json().attempt.attempt_id };
  };

  const span = (
    ids: { rid: string; aid: string },
    seq: number,
    name: string,
    attributes: Record<string, unknown>,
    resource: Record<string, unknown> = {},
  ) => ({
    rollout_id: ids.rid,
    attempt_id: ids.aid,
    sequence_id: seq,
    trace_id: "a".repeat(32),
    span_id: seq.toString(16).padStart(16, "0"),
    parent_id: null,
    name,
    status: { status_code: "OK", description: null },
    attributes,
    events: [{ name: "e", attributes, timestamp: seq }],
    links: [],
    start_time: seq,
    end_time: seq + 0.5,
    context: null,
    parent: null,
    resource: { attributes: resource, schema_url: "" },
  });

  /** Spans stored, the first few one by one (`POST /spans`), the others in one batch (`POST /spans/batch`). */
  const storeSpans = async (spans: ReturnType<typeof span>[]) => {
    const half = Math.min(Math.ceil(spans.length / 2), 12);
    for (const s of spans.slice(0, half)) expect((await agl("POST", "/spans", JSON.stringify(s))).status).toBe(201);
    const batch = await agl("POST", "/spans/batch", JSON.stringify({ spans: spans.slice(half) }));
    expect(batch.status, batch.text.slice(0, 300)).toBe(201);
    const stored = (await get(`/spans?rollout_id=${spans[0]!.rollout_id}&limit=-1`)).items as Span[];
    expect(stored.map((s) => JSON.stringify(s.attributes))).toEqual(spans.map((s) => JSON.stringify(s.attributes)));
    return stored;
  };

  const triplets = async (rid: string, adapter: "tracer" | "proxy") =>
    (await get(`/rollouts/${rid}/triplets?adapter=${adapter}`)) as { triplets: Triplet[]; error: string | null };

  it("the reported spans (agentlightning.reward.__proto__.polluted, gen_ai.prompt.__proto__.x.y) leave every route answering", async () => {
    const ids = await newRollout();
    const attributes = obj([
      ["gen_ai.prompt.__proto__.x.y", 1],
      ["gen_ai.prompt.0.role", "user"],
    ]);
    await storeSpans([
      span(ids, 1, "openai.chat.completion", attributes),
      span(ids, 2, "agentlightning.annotation", obj([["agentlightning.reward.__proto__.polluted", 1]])),
    ]);
    // The dashboard's rollout page asks for these; before keys were data, every route answered 500 after it.
    const t = await agl("GET", `/rollouts/${ids.rid}/triplets`);
    await expectHealthy("after the triplets");
    expect(t.status).toBe(200);
    expect(t.json().error).toMatch(/must form a list/);
    expect(JSON.stringify(new TraceTripletAdapter().adapt([span(ids, 1, "openai.chat.completion", attributes) as Span])[0]!.prompt)).toBe(
      '{"token_ids":[],"raw_content":{"0":{"role":"user"},"__proto__":{"x":{"y":1}}},"image_urls":[]}',
    );
  });

  it("LLM-call spans: gen_ai.* and agentlightning.operation.* keys unflatten into triplets as data", async () => {
    const ids = await newRollout();
    // One span per case and per way of writing messages, so that keys of one case do not overwrite another's.
    const spans = CASES.flatMap(({ shape, value }, i) => [
      span(
        ids,
        2 * i + 1,
        "openai.chat.completion",
        obj([
          [`gen_ai.prompt.${shape}`, value],
          [`gen_ai.completion.${shape}`, value],
          [`gen_ai.request.${shape}`, value],
          [`gen_ai.response.${shape}`, value],
        ]),
        obj([[shape, value]]),
      ),
      span(
        ids,
        2 * i + 2,
        "openai.chat.completion",
        obj([
          [`agentlightning.operation.input.messages.${shape}`, value],
          [`agentlightning.operation.output.choices.${shape}`, value],
          [`agentlightning.operation.input.${shape}`, value],
          [`agentlightning.operation.output.${shape}`, value],
        ]),
      ),
    ]);
    const stored = await storeSpans(spans);
    await expectHealthy("after storing");

    const fromRoute = await triplets(ids.rid, "tracer");
    await expectHealthy("after the tracer triplets");
    expect(fromRoute.error).toBeNull();
    expect(fromRoute.triplets).toHaveLength(spans.length);
    fromRoute.triplets.forEach((t, i) => {
      const { shape, value } = CASES[Math.floor(i / 2)]!;
      const expected = nestedText(shape, value);
      const what = `span ${i}: ${shape} = ${JSON.stringify(value)}`;
      expect(JSON.stringify(t.prompt.raw_content), what).toBe(expected);
      expect(JSON.stringify(t.response.raw_content), what).toBe(expected);
      // Under agentlightning.operation.input the messages sit beside the case's keys, so a leading 0 is a
      // key of that object (not a list) before `messages` is taken out.
      const request = i % 2 === 1 && shape.startsWith("0.") ? `{"0":${nestedText(shape.slice(2), value)}}` : expected;
      expect(JSON.stringify(t.metadata.request), what).toBe(request);
      expect(JSON.stringify(t.metadata.response), what).toBe(request);
    });
    expect((await triplets(ids.rid, "proxy")).triplets).toEqual([]);

    // The same spans through the adapters and the dashboard's reader in this process.
    expect(JSON.stringify(new TraceTripletAdapter().adapt(stored))).toBe(JSON.stringify(fromRoute.triplets));
    for (const s of stored) {
      const c = llmCall(s) as { prompt: Record<string, unknown>[]; completion: Record<string, unknown>[] };
      const shape = Object.keys(s.attributes)[0]!.slice("gen_ai.prompt.".length);
      if (!s.attributes[`gen_ai.prompt.${shape}`] || !/^0\.[^.]+$/.test(shape)) continue;
      // `gen_ai.prompt.0.__proto__` is the field "__proto__" of message 0, an own key like any other.
      const field = shape.slice(2);
      expect(Object.keys(c.prompt[0]!), shape).toEqual([field]);
      expect(JSON.stringify(Object.values(c.prompt[0]!)[0]), shape).toBe(JSON.stringify(s.attributes[`gen_ai.prompt.${shape}`]));
    }
    expect(() => new TraceToMessages().adapt(stored)).toThrow(ValidationError);
    await expectHealthy("after the adapters");
  });

  it("reward spans: agentlightning.reward.* keys are data; a trace they make unreadable is an error to show, not a 500", async () => {
    const ids = await newRollout();
    const spans = CASES.flatMap(({ shape, value }, i) => [
      span(ids, 2 * i + 1, "agentlightning.annotation", obj([[`agentlightning.reward.${shape}`, value]])),
      span(
        ids,
        2 * i + 2,
        "agentlightning.annotation",
        obj([
          ["agentlightning.reward.0.name", "score"],
          ["agentlightning.reward.0.value", 0.5],
          [`agentlightning.reward.0.${shape}`, value],
        ]),
      ),
    ]);
    const stored = await storeSpans(spans);
    for (const adapter of ["tracer", "proxy"] as const) {
      const t = await triplets(ids.rid, adapter);
      expect(t.triplets).toEqual([]);
      await expectHealthy(`after the ${adapter} triplets`);
    }
    stored.forEach((s, i) => {
      const what = JSON.stringify(s.attributes);
      if (i % 2 === 1) expect(getRewardValue(s), what).toBe(0.5);
      else {
        // Alone, the keys do not form a list of {name, value}: the reader says so (or finds no reward).
        let v: unknown;
        try {
          v = getRewardValue(s);
        } catch (e) {
          v = e;
        }
        if (v !== null) expect(v, what).toBeInstanceOf(ValidationError);
      }
      expect(() => rewardValues(s), what).not.toThrow();
    });
    await expectHealthy("after the adapters");
  });

  it("proxy spans and chat records: Python-literal dicts and tool parameters keep prototype-naming keys as data", async () => {
    const ids = await newRollout();
    const choices = "[{'token_ids': [3], '__proto__': {'token_ids': [9]}, 'constructor': {'prototype': {'x': 1}}}]";
    const proxySpans = [
      span(
        ids,
        1,
        "raw_gen_ai_request",
        obj([
          ["llm.hosted_vllm.prompt_token_ids", "[1, 2]"],
          ["llm.hosted_vllm.choices", choices],
        ]),
      ),
      // Without its own token ids, the inherited-looking ones under `__proto__` are not the response.
      span(
        ids,
        2,
        "raw_gen_ai_request",
        obj([
          ["llm.hosted_vllm.prompt_token_ids", "[4]"],
          ["llm.hosted_vllm.choices", "[{'__proto__': {'token_ids': [9]}}]"],
        ]),
      ),
    ];
    const chatSpans = CASES.map(({ shape, value }, i) =>
      span(
        ids,
        i + 3,
        "openai.chat.completion",
        obj([
          ["gen_ai.prompt.0.role", "user"],
          ["gen_ai.prompt.0.content", "hi"],
          ["gen_ai.completion.0.role", "assistant"],
          ["gen_ai.completion.0.content", "ok"],
          ["gen_ai.request.functions.0.name", "f"],
          [`gen_ai.request.functions.0.parameters.${shape}`, value],
        ]),
      ),
    );
    const stored = await storeSpans([...proxySpans, ...chatSpans]);

    const proxy = await triplets(ids.rid, "proxy");
    expect(proxy.triplets.map((t) => [t.prompt.token_ids, t.response.token_ids])).toEqual([[[1, 2], [3]]]);
    expect((await triplets(ids.rid, "tracer")).triplets).toHaveLength(chatSpans.length);
    await expectHealthy("after the triplets");
    expect(new LlmProxyTraceToTriplet().adapt(stored).map((t) => t.response.token_ids)).toEqual([[3]]);
    const records = new TraceToMessages().adapt(stored);
    expect(records).toHaveLength(CASES.length);
    records.forEach((r, i) => {
      const { shape, value } = CASES[i]!;
      expect(JSON.stringify(r.tools![0]!.function), shape).toBe(`{"name":"f","description":"","parameters":${nestedText(shape, value)}}`);
    });
    await expectHealthy("after the adapters");
  });

  it("OTLP/JSON and OTLP protobuf: flat and kvlist attribute keys, resource attributes and odd field names", async () => {
    const ids = await newRollout();
    const str = (stringValue: string) => ({ stringValue });
    const kv = (key: string, value: unknown) => ({ key, value });
    const kvlist = (k: string) => ({ kvlistValue: { values: [kv(k, { kvlistValue: { values: [kv("x", str("v"))] } })] } });
    // OTLP/JSON writes ids in hex, the protobuf JSON mapping (used here to build the binary message) in base64.
    const otlpSpan = (shape: string, i: number, id: (hex: string) => string) => ({
      traceId: id("01".repeat(16)),
      spanId: id((i + 1).toString(16).padStart(16, "0")),
      name: "openai.chat.completion",
      startTimeUnixNano: String((i + 1) * 1e9),
      endTimeUnixNano: String((i + 1) * 1e9 + 5e8),
      attributes: [
        kv("agentlightning.rollout_id", str(ids.rid)),
        kv("agentlightning.attempt_id", str(ids.aid)),
        kv("agentlightning.span_sequence_id", { intValue: String(i + 1) }),
        kv(`gen_ai.prompt.${shape}`, str("v")),
        // A kvlist is flattened into dotted keys: gen_ai.completion.<k>.x
        kv("gen_ai.completion", kvlist(shape.split(".").at(-1)!)),
      ],
    });
    const request = (shapes: string[], offset: number, id = (hex: string) => hex) => ({
      resourceSpans: [
        {
          resource: { attributes: PROTOTYPE_KEYS.map((k) => kv(k, kvlist(k))) },
          scopeSpans: [{ spans: shapes.map((s, i) => otlpSpan(s, offset + i, id)) }],
        },
      ],
    });
    const half = Math.ceil(SHAPES.length / 2);
    const json = await call("POST", "/v1/traces", JSON.stringify(request(SHAPES.slice(0, half), 0)));
    expect(json.status, json.text).toBe(200);
    const base64 = (hex: string) => Buffer.from(hex, "hex").toString("base64");
    const msg = fromJson(ExportTraceServiceRequestSchema, request(SHAPES.slice(half), half, base64) as never);
    const proto = await fetch(`${server.url}/v1/traces`, {
      method: "POST",
      headers: { "content-type": "application/x-protobuf" },
      body: toBinary(ExportTraceServiceRequestSchema, msg),
    });
    expect(proto.status).toBe(200);
    // Prototype-naming field names in the OTLP/JSON structure itself: unknown fields, never a 500.
    for (const k of PROTOTYPE_KEYS) {
      for (const text of [
        objText([[k, objText([["polluted", "1"]])]]),
        objText([
          [
            "resourceSpans",
            `[${objText([
              [k, "{}"],
              ["scopeSpans", `[${objText([[k, "1"]])}]`],
            ])}]`,
          ],
        ]),
      ]) {
        const r = await call("POST", "/v1/traces", text);
        expect(r.status, `${text}: ${r.text}`).toBeLessThan(500);
      }
    }
    await expectHealthy("after OTLP");

    const stored = (await get(`/spans?rollout_id=${ids.rid}&limit=-1`)).items as Span[];
    expect(stored).toHaveLength(SHAPES.length);
    stored.forEach((s, i) => {
      const last = SHAPES[i]!.split(".").at(-1)!;
      expect(s.attributes[`gen_ai.prompt.${SHAPES[i]}`]).toBe("v");
      expect(Object.hasOwn(s.attributes, `gen_ai.completion.${last}.x`)).toBe(true);
      expect(Object.keys(s.resource.attributes)).toEqual(PROTOTYPE_KEYS.map((k) => `${k}.${k}.x`));
    });
    const t = await triplets(ids.rid, "tracer");
    expect(t.triplets.map((x) => JSON.stringify(x.prompt.raw_content))).toEqual(SHAPES.map((s) => nestedText(s, "v")));
    expect(t.triplets.map((x) => JSON.stringify(x.response.raw_content))).toEqual(
      SHAPES.map((s) => nestedText(`${s.split(".").at(-1)}.x`, "v")),
    );
    await expectHealthy("after the triplets");
  });

  it("resources named __proto__, constructor and prototype are validated, stored and read back as data", async () => {
    const llm = objText([
      ["resource_type", '"llm"'],
      ["endpoint", '"http://x"'],
      ["model", '"m"'],
      ["api_key", "null"],
      ["sampling_parameters", DATA_TEXT],
    ]);
    const text = objText(PROTOTYPE_KEYS.map((k) => [k, llm]));
    const added = await agl("POST", "/resources", text);
    expect(added.status, added.text).toBe(201);
    const id = added.json().resources_id as string;
    const updated = await agl("POST", `/resources/${id}`, text);
    expect(updated.status, updated.text).toBe(200);
    for (const path of ["/resources/latest", `/resources/${id}`]) expect(JSON.stringify((await get(path)).resources)).toBe(text);
    expect(((await get("/resources")).items as { resources: unknown }[]).map((r) => JSON.stringify(r.resources))).toEqual([text]);

    for (const k of PROTOTYPE_KEYS) {
      const bad = await agl("POST", "/resources", objText([[k, '{"resource_type":"llm","endpoint":5}']]));
      expect(bad.status, `${k}: ${bad.text}`).toBe(400);
      expect(bad.json().issues[0].path, k).toEqual([k, "endpoint"]);
    }
    expect((await get("/resources")).total).toBe(1);
    await expectHealthy("after resources");
  });

  it("rollout inputs, metadata, attempt metadata and heartbeat stats keep prototype-naming keys as data", async () => {
    const started = await agl(
      "POST",
      "/rollouts",
      objText([
        ["input", DATA_TEXT],
        ["metadata", DATA_TEXT],
      ]),
    );
    expect(started.status, started.text).toBe(201);
    const rid = started.json().rollout_id as string;
    const aid = started.json().attempt.attempt_id as string;
    const enqueued = await agl(
      "POST",
      "/queues/rollouts/enqueue",
      objText([
        [
          "rollouts",
          `[${objText([
            ["input", DATA_TEXT],
            ["metadata", DATA_TEXT],
          ])},${objText([["input", DATA_TEXT]])}]`,
        ],
      ]),
    );
    expect(enqueued.status, enqueued.text).toBe(201);
    const patched = await agl(
      "POST",
      `/rollouts/${rid}`,
      objText([
        ["input", DATA_TEXT],
        ["metadata", DATA_TEXT],
      ]),
    );
    expect(patched.status, patched.text).toBe(200);
    const attempt = await agl("POST", `/rollouts/${rid}/attempts/${aid}`, objText([["metadata", DATA_TEXT]]));
    expect(attempt.status, attempt.text).toBe(200);
    const worker = await agl("POST", "/workers/w1", objText([["heartbeat_stats", DATA_TEXT]]));
    expect(worker.status, worker.text).toBe(200);
    await expectHealthy("after storing");

    const rollout = await get(`/rollouts/${rid}`);
    expect(JSON.stringify(rollout.input)).toBe(DATA_TEXT);
    expect(JSON.stringify(rollout.metadata)).toBe(DATA_TEXT);
    for (const page of [await get("/rollouts"), (await agl("POST", "/rollouts/search", "{}")).json()]) {
      expect(page.items.map((r: { input: unknown }) => JSON.stringify(r.input))).toEqual([DATA_TEXT, DATA_TEXT, DATA_TEXT]);
    }
    expect(JSON.stringify((await get(`/rollouts/${rid}/attempts/latest`)).metadata)).toBe(DATA_TEXT);
    expect(JSON.stringify((await get(`/rollouts/${rid}/attempts`)).items[0].metadata)).toBe(DATA_TEXT);
    expect(JSON.stringify((await get("/workers/w1")).heartbeat_stats)).toBe(DATA_TEXT);
    expect(JSON.stringify((await get("/workers")).items[0].heartbeat_stats)).toBe(DATA_TEXT);
    // metadata.kind makes these bookkeeping runs on the dashboard's training page.
    expect((await get("/training/runs")).items.map((r: { input: unknown }) => JSON.stringify(r.input))).toHaveLength(2);
    expect((await get("/statistics/rollouts")).total).toBe(3);
    await expectHealthy("after reading back");
  });
});
