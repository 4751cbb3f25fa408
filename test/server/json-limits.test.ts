/**
 * JSON bodies at the HTTP layer: nesting deeper than MAX_JSON_DEPTH and an object with more than
 * MAX_JSON_KEYS keys are 400s naming where (on every route that takes JSON, OTLP included), never a 500;
 * `"__proto__"` keys travel through the server and the client and come back byte for byte, from the
 * memory store and from a libSQL file.
 */
import { create, toBinary } from "@bufbuild/protobuf";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LightningStoreClient } from "../../src/client/index.ts";
import { createStoreApp } from "../../src/server/index.ts";
import { MAX_JSON_KEYS } from "../../src/server/json-scan.ts";
import { ExportTraceServiceRequestSchema } from "../../src/server/otlp/schema.ts";
import type { LightningStore } from "../../src/store/base.ts";
import { LibsqlLightningStore } from "../../src/store/libsql/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { MAX_JSON_DEPTH } from "../../src/store/owned.ts";
import type { Span } from "../../src/types/index.ts";
import { PROTO_INPUT, PROTO_METADATA, PROTO_STATS, expectSameJsonFields, protoSpanText } from "../store/proto-json.ts";

const deepText = (levels: number): string => "[".repeat(levels) + "0" + "]".repeat(levels);

async function seeded() {
  const store = new InMemoryLightningStore({ scanDebounceSeconds: 0 });
  const r = await store.startRollout({ q: 1 });
  await store.enqueueRollout({ q: 2 });
  const app = createStoreApp(store);
  const dump = async () =>
    JSON.stringify([
      await store.queryRollouts(),
      await store.queryAttempts(r.rollout_id),
      await store.querySpans(r.rollout_id),
      await store.queryWorkers(),
      await store.queryResources(),
    ]);
  return { store, app, r, dump };
}

const postText = (app: ReturnType<typeof createStoreApp>, path: string, body: string, type = "application/json") =>
  app.request(path, { method: "POST", headers: { "content-type": type }, body });

describe(`request bodies nested more than ${MAX_JSON_DEPTH} levels`, () => {
  /** [route, body text around the deep value `D`, the path the issue must start with] */
  const routes = (rid: string, aid: string): [string, string, (string | number)[]][] => [
    ["/v1/agl/rollouts", '{"input":D}', ["input"]],
    ["/v1/agl/queues/rollouts/enqueue", '{"rollouts":[{"input":D}]}', ["rollouts", 0, "input"]],
    ["/v1/agl/rollouts/search", '{"rollout_id_in":D}', ["rollout_id_in"]],
    [`/v1/agl/rollouts/${rid}`, '{"metadata":{"x":D}}', ["metadata", "x"]],
    [`/v1/agl/rollouts/${rid}/attempts`, '{"worker_id":D}', ["worker_id"]],
    [`/v1/agl/rollouts/${rid}/attempts/${aid}`, '{"metadata":{"x":D}}', ["metadata", "x"]],
    [`/v1/agl/rollouts/${rid}/attempts/search`, '{"limit":D}', ["limit"]],
    ["/v1/agl/workers/w1", '{"heartbeat_stats":{"x":D}}', ["heartbeat_stats", "x"]],
    ["/v1/agl/workers/search", '{"status_in":D}', ["status_in"]],
    ["/v1/agl/resources", '{"llm":D}', ["llm"]],
    ["/v1/agl/resources/res-1", '{"llm":D}', ["llm"]],
    ["/v1/agl/spans", '{"rollout_id":"x","deep":D}', ["deep"]],
    ["/v1/agl/spans/batch", '{"spans":[{"deep":D}]}', ["spans", 0, "deep"]],
    ["/v1/agl/spans/search", '{"rollout_id":D}', ["rollout_id"]],
    ["/v1/agl/spans/next", '{"rollout_id":D}', ["rollout_id"]],
    ["/v1/agl/spans/next/many", '{"pairs":D}', ["pairs"]],
    [
      "/v1/agl/attempts/finish",
      `{"rollout_id":"${rid}","attempt_id":"${aid}","spans":[{"x":D}],"attempt":{"status":"succeeded"}}`,
      ["spans", 0, "x"],
    ],
    ["/v1/agl/waits/rollouts", '{"rollout_ids":D}', ["rollout_ids"]],
    ["/v1/agl/queues/rollouts/dequeue", '{"worker_id":D}', ["worker_id"]],
  ];

  it("every JSON route answers 400 with the path of the first value past the limit, and stores nothing", async () => {
    const { app, r, dump, store } = await seeded();
    const before = await dump();
    for (const [path, template, prefix] of routes(r.rollout_id, r.attempt.attempt_id)) {
      for (const levels of [MAX_JSON_DEPTH, 100_000]) {
        const res = await postText(app, path, template.replace("D", deepText(levels)));
        const body = (await res.json()) as { detail: string; error_type: string; issues: { path: (string | number)[] }[] };
        expect(res.status, `${path} ${levels}`).toBe(400);
        expect(body.error_type).toBe("ValidationError");
        expect(body.detail).toMatch(`nested more than ${MAX_JSON_DEPTH} levels deep`);
        const issuePath = body.issues[0]!.path;
        // The first container past the limit, reached from the body's top level.
        expect(issuePath.slice(0, prefix.length), path).toEqual(prefix);
        expect(issuePath).toHaveLength(MAX_JSON_DEPTH);
      }
    }
    expect(await dump()).toBe(before);
    await store.close();
  });

  it(`a body exactly ${MAX_JSON_DEPTH} levels deep is taken`, async () => {
    const { app, store } = await seeded();
    // `{"input": ...}` is the first level.
    const res = await postText(app, "/v1/agl/rollouts", `{"input":${deepText(MAX_JSON_DEPTH - 1)}}`);
    expect(res.status).toBe(201);
    const r = (await res.json()) as { rollout_id: string };
    expect(JSON.stringify((await store.getRolloutById(r.rollout_id))!.input)).toBe(deepText(MAX_JSON_DEPTH - 1));
    await store.close();
  });

  it("OTLP/JSON: a google.rpc.Status 400 naming the limit", async () => {
    const { app, dump, store } = await seeded();
    const before = await dump();
    const value = `{"arrayValue":{"values":[${deepText(600)}]}}`;
    const body = `{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"s","attributes":[{"key":"k","value":${value}}]}]}]}]}`;
    const res = await postText(app, "/v1/traces", body);
    expect(res.status).toBe(400);
    const status = (await res.json()) as { code: number; message: string };
    expect(status.code).toBe(3);
    expect(status.message).toMatch(`nested more than ${MAX_JSON_DEPTH} levels deep`);
    expect(await dump()).toBe(before);
    await store.close();
  });

  it("OTLP protobuf: attribute values nested deeply are a 400 (the decoder's own limit), not a stack overflow", async () => {
    const { app, dump, store, r } = await seeded();
    const before = await dump();
    let value: Record<string, unknown> = { value: { case: "stringValue", value: "leaf" } };
    for (let i = 0; i < MAX_JSON_DEPTH + 5; i++) value = { value: { case: "kvlistValue", value: { values: [{ key: "k", value }] } } };
    const attrs = [
      { key: "agentlightning.rollout_id", value: { value: { case: "stringValue", value: r.rollout_id } } },
      { key: "agentlightning.attempt_id", value: { value: { case: "stringValue", value: r.attempt.attempt_id } } },
      { key: "deep", value },
    ];
    const msg = create(ExportTraceServiceRequestSchema, {
      resourceSpans: [
        {
          scopeSpans: [
            { spans: [{ traceId: new Uint8Array(16).fill(1), spanId: new Uint8Array(8).fill(2), name: "s", attributes: attrs }] },
          ],
        },
      ],
    } as never);
    const res = await app.request("/v1/traces", {
      method: "POST",
      headers: { "content-type": "application/x-protobuf" },
      body: toBinary(ExportTraceServiceRequestSchema, msg),
    });
    expect(res.status).toBe(400);
    expect(await dump()).toBe(before);
    await store.close();
  });
});

describe(`request bodies with an object of more than ${MAX_JSON_KEYS} keys`, () => {
  /** An object with `n` members, as JSON text. */
  const wideText = (n: number): string => `{${Array.from({ length: n }, (_, i) => `"k${i}":${i % 10}`).join(",")}}`;

  it("is a 400 naming the object's path, on routes of every kind, and stores nothing", async () => {
    const { app, r, dump, store } = await seeded();
    const before = await dump();
    const aid = r.attempt.attempt_id;
    const cases: [string, string, (string | number)[]][] = [
      ["/v1/agl/rollouts", '{"input":W}', ["input"]],
      ["/v1/agl/queues/rollouts/enqueue", '{"rollouts":[{"input":1},{"input":{"a":W}}]}', ["rollouts", 1, "input", "a"]],
      ["/v1/agl/resources", "W", []],
      ["/v1/agl/spans/batch", `{"spans":[{"rollout_id":"${r.rollout_id}","attributes":W}]}`, ["spans", 0, "attributes"]],
      [
        "/v1/agl/attempts/finish",
        `{"rollout_id":"${r.rollout_id}","attempt_id":"${aid}","spans":[],"attempt":{"status":"succeeded","metadata":W}}`,
        ["attempt", "metadata"],
      ],
    ];
    for (const [path, template, issuePath] of cases) {
      const res = await postText(app, path, template.replace("W", wideText(MAX_JSON_KEYS + 1)));
      const body = (await res.json()) as { detail: string; error_type: string; issues: { path: (string | number)[]; message: string }[] };
      expect(res.status, path).toBe(400);
      expect(body.error_type).toBe("ValidationError");
      expect(body.detail).toMatch(`an object with more than ${MAX_JSON_KEYS} keys`);
      expect(body.issues[0]!.path, path).toEqual(issuePath);
    }
    // The body of the report: one object with a million keys (12 MB).
    const million = await postText(app, "/v1/agl/rollouts", `{"input":${wideText(1_000_000)}}`);
    expect(million.status).toBe(400);
    expect(await dump()).toBe(before);
    await store.close();
  });

  it(`an object of exactly ${MAX_JSON_KEYS} keys is taken, and the limit is per object, not per body`, async () => {
    const { app, store } = await seeded();
    const res = await postText(app, "/v1/agl/rollouts", `{"input":${wideText(MAX_JSON_KEYS)}}`);
    expect(res.status).toBe(201);
    const r = (await res.json()) as { rollout_id: string };
    expect(Object.keys((await store.getRolloutById(r.rollout_id))!.input as object)).toHaveLength(MAX_JSON_KEYS);
    const many = `{"rollouts":[${Array.from({ length: 3 }, () => `{"input":${wideText(MAX_JSON_KEYS)}}`).join(",")}]}`;
    expect((await postText(app, "/v1/agl/queues/rollouts/enqueue", many)).status).toBe(201);
    await store.close();
  });

  it("OTLP/JSON: a google.rpc.Status 400 naming the limit", async () => {
    const { app, dump, store } = await seeded();
    const before = await dump();
    const body = `{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"s","extra":${wideText(MAX_JSON_KEYS + 1)}}]}]}]}`;
    const res = await postText(app, "/v1/traces", body);
    expect(res.status).toBe(400);
    const status = (await res.json()) as { code: number; message: string };
    expect(status.code).toBe(3);
    expect(status.message).toMatch(`an object with more than ${MAX_JSON_KEYS} keys`);
    expect(await dump()).toBe(before);
    await store.close();
  });
});

describe("Content-Type of JSON bodies", () => {
  it("a body sent as a form or plain text is a 415 with the JSON error shape, and stores nothing", async () => {
    const { app, dump, store } = await seeded();
    const before = await dump();
    for (const type of [
      "text/plain",
      "text/plain;charset=UTF-8",
      "application/x-www-form-urlencoded",
      "multipart/form-data; boundary=x",
      "application/xml",
    ]) {
      for (const path of ["/v1/agl/rollouts", "/v1/agl/queues/rollouts/enqueue", "/v1/agl/resources"]) {
        const body = path.endsWith("enqueue") ? '{"rollouts":[{"input":1}]}' : path.endsWith("resources") ? "{}" : '{"input":1}';
        const res = await postText(app, path, body, type);
        expect(res.status, `${type} ${path}`).toBe(415);
        expect(await res.json()).toMatchObject({ error_type: "UnsupportedMediaType", detail: expect.stringContaining(type) });
      }
    }
    expect(await dump()).toBe(before);
    await store.close();
  });

  it("a JSON type, with parameters or a +json suffix, is read as JSON; a body without a type is a 415; an empty optional body needs none", async () => {
    const { app, dump, store } = await seeded();
    for (const type of ["application/json", "Application/JSON; charset=utf-8", "application/vnd.api+json"]) {
      expect((await postText(app, "/v1/agl/rollouts", '{"input":1}', type)).status, type).toBe(201);
    }
    // A string body gets text/plain from fetch itself; bytes (a Blob a page posts with no-cors) go without a type.
    const before = await dump();
    const untyped = await app.request("/v1/agl/rollouts", { method: "POST", body: new TextEncoder().encode('{"input":1}') });
    expect(untyped.status).toBe(415);
    expect(await untyped.json()).toMatchObject({ error_type: "UnsupportedMediaType", detail: expect.stringContaining("no Content-Type") });
    expect(await dump()).toBe(before);
    expect(
      (await app.request("/v1/agl/queues/rollouts/dequeue", { method: "POST", headers: { "content-type": "text/plain" } })).status,
    ).toBe(200);
    await store.close();
  });
});

describe('"__proto__" keys through the server and the client', () => {
  const dir = mkdtempSync(join(tmpdir(), "json-limits-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const backends: [string, () => Promise<LightningStore>][] = [
    ["memory", async () => new InMemoryLightningStore()],
    ["libSQL file", () => LibsqlLightningStore.open(`file:${join(dir, "proto.db")}`)],
  ];

  it.each(backends)("%s store: inputs, metadata, spans, resources and stats come back byte for byte", async (_name, open) => {
    const store = await open();
    const app = createStoreApp(store);
    const client = new LightningStoreClient("http://store.test", {
      fetch: async (input, init) => app.fetch(new Request(input, init)),
      retryDelays: [],
    });
    const r = await client.startRollout(JSON.parse(PROTO_INPUT), { metadata: JSON.parse(PROTO_METADATA) });
    expect(JSON.stringify(r.input)).toBe(PROTO_INPUT);
    const [q] = await client.enqueueManyRollouts([{ input: JSON.parse(PROTO_INPUT), metadata: JSON.parse(PROTO_METADATA) }]);
    await client.updateAttempt(r.rollout_id, r.attempt.attempt_id, { metadata: JSON.parse(PROTO_METADATA) });
    const aid = r.attempt.attempt_id;
    const spans = [protoSpanText(r.rollout_id, aid, 1, "b".repeat(16), true), protoSpanText(r.rollout_id, aid, 2, "c".repeat(16), true)];
    await client.addSpan(JSON.parse(spans[0]!) as Span);
    await client.addManySpans([JSON.parse(spans[1]!) as Span]);
    const resourcesText = '{"__proto__":{"resource_type":"prompt_template","template":"t","engine":"f-string"}}';
    const res = await client.addResources(JSON.parse(resourcesText));
    await client.updateWorker("w1", JSON.parse(PROTO_STATS));

    // The raw answer carries the sent text itself.
    const raw = await (await app.request(`/v1/agl/rollouts/${r.rollout_id}`)).text();
    expect(raw).toContain(`"input":${PROTO_INPUT}`);
    expect(raw).toContain(`"metadata":${PROTO_METADATA}`);
    const rollouts = (await client.queryRollouts()).items;
    expect(rollouts.map((x) => JSON.stringify(x.input))).toEqual([PROTO_INPUT, PROTO_INPUT]);
    expect(JSON.stringify((await client.getRolloutById(q!.rollout_id))!.metadata)).toBe(PROTO_METADATA);
    expect(JSON.stringify((await client.getLatestAttempt(r.rollout_id))!.metadata)).toBe(PROTO_METADATA);
    const stored = (await client.querySpans(r.rollout_id)).items;
    expect(stored).toHaveLength(2);
    stored.forEach((s, i) => expectSameJsonFields(s, JSON.parse(spans[i]!)));
    expect(JSON.stringify((await client.getResourcesById(res.resources_id))!.resources)).toBe(resourcesText);
    expect(JSON.stringify((await client.getWorkerById("w1"))!.heartbeat_stats)).toBe(PROTO_STATS);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    await store.close();
  });

  it("OTLP protobuf: an attribute named __proto__ and a trace state key __proto__ are kept", async () => {
    const { app, store, r } = await seeded();
    const str = (value: string) => ({ value: { case: "stringValue", value } });
    const attributes = [
      { key: "agentlightning.rollout_id", value: str(r.rollout_id) },
      { key: "agentlightning.attempt_id", value: str(r.attempt.attempt_id) },
      { key: "__proto__", value: str("attr") },
    ];
    const msg = create(ExportTraceServiceRequestSchema, {
      resourceSpans: [
        {
          scopeSpans: [
            {
              spans: [
                {
                  traceId: new Uint8Array(16).fill(1),
                  spanId: new Uint8Array(8).fill(2),
                  traceState: "__proto__=v",
                  name: "s",
                  attributes,
                },
              ],
            },
          ],
        },
      ],
    } as never);
    const res = await app.request("/v1/traces", {
      method: "POST",
      headers: { "content-type": "application/x-protobuf" },
      body: toBinary(ExportTraceServiceRequestSchema, msg),
    });
    expect(res.status).toBe(200);
    const [span] = (await store.querySpans(r.rollout_id)).items;
    expect(Object.hasOwn(span!.attributes, "__proto__") && span!.attributes["__proto__"]).toBe("attr");
    expect(JSON.stringify(span!.context!.trace_state)).toBe('{"__proto__":"v"}');
    await store.close();
  });

  it("a query parameter named __proto__ is an unknown parameter (400), not silently dropped", async () => {
    const { app, store } = await seeded();
    const res = await app.request("/v1/agl/rollouts?__proto__=x");
    expect(res.status).toBe(400);
    expect(((await res.json()) as { detail: string }).detail).toMatch(/__proto__/);
    await store.close();
  });
});
