/**
 * A bounded, seeded fuzz of the store server: a few thousand generated bad requests (wrong methods,
 * malformed and truncated JSON, wrong types, huge numbers, deep nesting, unknown ids and routes, bad query
 * parameters, non-JSON content types, `__proto__`/`constructor` keys, bad OTLP payloads) against an app
 * over a store with seeded data (memory, and libSQL in memory), in process (`app.request`), then a
 * shorter run over real HTTP with raw socket abuse (bodies cut short, garbage request lines).
 *
 * Every request is built to be refused (or is a read): no answer may be a 5xx, every refusal on the API
 * has the JSON error shape, the server logs no error, and afterwards the store's data is byte for byte
 * what it was. A failure prints the seed and the request; `AGL_FUZZ_SEED=<n>` replays a run.
 */
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createStoreApp } from "../../src/server/index.ts";
import type { LogWriter } from "../../src/platform/log.ts";
import type { LightningStore } from "../../src/store/base.ts";
import { LibsqlLightningStore } from "../../src/store/libsql/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { ManualClock, spanFromAttributes, type Span } from "../../src/types/index.ts";
import { startInProcess, type InProcessServer } from "../server/in-process.ts";
import { rng } from "../wasm/random.ts";

const SEED = Number(process.env.AGL_FUZZ_SEED ?? 0x5eed_f022);
const IN_PROCESS_REQUESTS: Record<StoreKind, number> = { memory: 3_000, libSQL: 1_000 };
const HTTP_REQUESTS = 300;

// ------------------------------------------------------------------------------------------------
// The seeded store and its snapshot

interface Seeded {
  store: LightningStore;
  /** A running rollout with an attempt and spans. */
  rid: string;
  aid: string;
  /** A queued rollout (a valid dequeue would claim it). */
  queued: string;
  resourcesId: string;
  spanTemplate: Span;
}

type StoreKind = "memory" | "libSQL";

async function seededStore(kind: StoreKind = "memory"): Promise<Seeded> {
  const options = { clock: new ManualClock(1_000), scanDebounceSeconds: 0 };
  const store = kind === "memory" ? new InMemoryLightningStore(options) : await LibsqlLightningStore.open(":memory:", options);
  const r = await store.startRollout(
    { task: "fuzz", nested: { list: [1, 2, 3] } },
    { metadata: { owner: "fuzz" }, config: { max_attempts: 3 } },
  );
  await store.updateAttempt(r.rollout_id, r.attempt.attempt_id, { status: "running", worker_id: "w1" });
  const q = await store.enqueueRollout({ task: "queued" });
  const done = await store.startRollout("finished");
  await store.updateAttempt(done.rollout_id, done.attempt.attempt_id, { status: "succeeded" });
  const spans = Array.from({ length: 5 }, (_, i) =>
    spanFromAttributes({
      rollout_id: r.rollout_id,
      attempt_id: r.attempt.attempt_id,
      sequence_id: i + 1,
      name: `s${i}`,
      attributes: { i, tag: "x" },
    }),
  );
  await store.addManySpans(spans);
  await store.updateWorker("w1", { cpu: 0.5 });
  const res = await store.addResources({ llm: { resource_type: "llm", endpoint: "http://llm", model: "m" } });
  return {
    store,
    rid: r.rollout_id,
    aid: r.attempt.attempt_id,
    queued: q.rollout_id,
    resourcesId: res.resources_id,
    spanTemplate: spans[0]!,
  };
}

/** Everything the store holds, as one JSON text (uptime left out: it moves by itself). */
async function snapshot(s: LightningStore): Promise<string> {
  const rollouts = await s.queryRollouts();
  const perRollout = [];
  for (const r of rollouts.items)
    perRollout.push([await s.queryAttempts(r.rollout_id), await s.querySpans(r.rollout_id), await s.getLatestAttempt(r.rollout_id)]);
  const { uptime: _uptime, ...stats } = await s.statistics();
  return JSON.stringify({
    rollouts,
    perRollout,
    workers: await s.queryWorkers(),
    resources: await s.queryResources(),
    latest: await s.getLatestResources(),
    stats,
  });
}

// ------------------------------------------------------------------------------------------------
// Request generation

/** What an answer may be: refused (4xx), a read (2xx or 4xx), a single GET of an unknown id (404, or 200 null). */
type Expect = "refused" | "read" | "unknown-get";

interface FuzzRequest {
  label: string;
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: string | Uint8Array<ArrayBuffer>;
  expect: Expect;
}

const JSON_HEADERS = { "content-type": "application/json" };
const deep = (levels: number, open = "[", close = "]") => open.repeat(levels) + "1" + close.repeat(levels);
const deepObject = (levels: number) => '{"k":'.repeat(levels) + "1" + "}".repeat(levels);

/** Values of the wrong JSON type for a field of the given type, huge numbers included (null is left out: many fields take it). */
const WRONG_FOR: Record<string, unknown[]> = {
  string: [1, -1.5, 1e308, true, [], {}, ["a"], { s: "a" }],
  // biome-ignore lint/correctness/noPrecisionLoss: 1.5e400 is Infinity on purpose (a number JSON cannot carry)
  number: ["1", "", "NaN", true, [], {}, [1], 1.5e400 /* Infinity: written as 1e999 */],
  // biome-ignore lint/correctness/noPrecisionLoss: 1.5e400 is Infinity on purpose
  int: [1.5, -0.5, 2 ** 53 + 2, 1e300, -1e300, 1.5e400, "1", true, [], {}],
  object: [1, "x", true, [], [1], "{}"],
  array: [1, "x", true, {}, { 0: "a" }, "[]"],
  enum: ["", "RUNNING", "bogus", 1, [], {}],
};

/** JSON text with Infinity/NaN literals where a generated value asked for them (JSON.stringify writes null). */
const jsonText = (v: unknown): string =>
  JSON.stringify(v, (_k, x) => (typeof x === "number" && !Number.isFinite(x) ? `__NUM_${String(x)}__` : x)).replace(
    /"__NUM_(-?Infinity|NaN)__"/g,
    (_m, n: string) => (n === "NaN" ? "NaN" : n.startsWith("-") ? "-1e999" : "1e999"),
  );

/**
 * A POST route with a valid body template and its fields' types. Every generated request changes one
 * thing that the route must refuse; `strict`: an unknown top-level key is refused there.
 */
interface WriteRoute {
  path: string;
  valid: () => Record<string, unknown>;
  fields: Record<string, keyof typeof WRONG_FOR>;
  /** Required fields (dropping one must be refused). */
  required: string[];
  strict: boolean;
  /** Paths with an unknown id in them that must be refused (404). */
  unknownIdPaths?: string[];
}

function writeRoutes(s: Seeded): WriteRoute[] {
  const span = () => JSON.parse(JSON.stringify({ ...s.spanTemplate, span_id: "f".repeat(16), sequence_id: 99 })) as Record<string, unknown>;
  return [
    {
      path: "/v1/agl/rollouts",
      valid: () => ({ input: { q: 1 }, mode: "train" }),
      fields: { mode: "enum", resources_id: "string", metadata: "object", config: "object", worker_id: "string" },
      required: ["input"],
      strict: true,
    },
    {
      path: "/v1/agl/queues/rollouts/enqueue",
      valid: () => ({ rollouts: [{ input: 1 }] }),
      fields: { rollouts: "array" },
      required: ["rollouts"],
      strict: true,
    },
    {
      path: "/v1/agl/queues/rollouts/dequeue",
      valid: () => ({ limit: 1, worker_id: "w9" }),
      fields: { limit: "int", worker_id: "string" },
      required: [],
      strict: true,
    },
    {
      path: `/v1/agl/rollouts/${s.rid}`,
      valid: () => ({ status: "failed" }),
      fields: { status: "enum", mode: "enum", resources_id: "string", config: "object", metadata: "object" },
      required: [],
      strict: true,
      unknownIdPaths: ["/v1/agl/rollouts/ro-000000000000", "/v1/agl/rollouts/%00", "/v1/agl/rollouts/..%2F..%2Fetc"],
    },
    {
      path: `/v1/agl/rollouts/${s.rid}/attempts`,
      valid: () => ({ worker_id: "w2" }),
      fields: { worker_id: "string" },
      required: [],
      strict: true,
      unknownIdPaths: ["/v1/agl/rollouts/ro-000000000000/attempts"],
    },
    {
      path: `/v1/agl/rollouts/${s.rid}/attempts/${s.aid}`,
      valid: () => ({ status: "succeeded" }),
      fields: { status: "enum", worker_id: "string", last_heartbeat_time: "number", metadata: "object" },
      required: [],
      strict: true,
      unknownIdPaths: [`/v1/agl/rollouts/${s.rid}/attempts/at-00000000`, "/v1/agl/rollouts/ro-000000000000/attempts/latest"],
    },
    {
      path: "/v1/agl/workers/w1",
      valid: () => ({ heartbeat_stats: { cpu: 1 } }),
      fields: { heartbeat_stats: "object" },
      required: [],
      strict: true,
    },
    {
      path: "/v1/agl/spans",
      valid: span,
      fields: {
        rollout_id: "string",
        attempt_id: "string",
        sequence_id: "int",
        name: "string",
        attributes: "object",
        events: "array",
        status: "object",
      },
      required: ["rollout_id", "attempt_id", "trace_id", "span_id", "name"],
      strict: false,
      unknownIdPaths: [],
    },
    { path: "/v1/agl/spans/batch", valid: () => ({ spans: [span()] }), fields: { spans: "array" }, required: ["spans"], strict: true },
    {
      path: "/v1/agl/spans/next",
      valid: () => ({ rollout_id: s.rid, attempt_id: s.aid }),
      fields: { rollout_id: "string", attempt_id: "string" },
      required: ["rollout_id", "attempt_id"],
      strict: true,
    },
    {
      path: "/v1/agl/spans/next/many",
      valid: () => ({ pairs: [[s.rid, s.aid]] }),
      fields: { pairs: "array" },
      required: ["pairs"],
      strict: true,
    },
    {
      path: "/v1/agl/attempts/finish",
      valid: () => ({
        rollout_id: s.rid,
        attempt_id: s.aid,
        spans: [span()],
        attempt: { status: "succeeded" },
        claim: { worker_id: "w1" },
      }),
      fields: { rollout_id: "string", attempt_id: "string", spans: "array", attempt: "object", claim: "object" },
      required: ["rollout_id", "attempt_id", "attempt"],
      strict: true,
    },
    {
      path: "/v1/agl/waits/rollouts",
      valid: () => ({ rollout_ids: [s.rid], timeout: 0 }),
      fields: { rollout_ids: "array", timeout: "number" },
      required: ["rollout_ids"],
      strict: true,
    },
  ];
}

/** Read-only routes: anything goes, but never a 5xx. */
function readRoutes(s: Seeded): { method: "GET" | "POST"; path: string }[] {
  return [
    { method: "GET", path: "/v1/agl/rollouts" },
    { method: "POST", path: "/v1/agl/rollouts/search" },
    { method: "GET", path: `/v1/agl/rollouts/${s.rid}/attempts` },
    { method: "POST", path: `/v1/agl/rollouts/${s.rid}/attempts/search` },
    { method: "GET", path: "/v1/agl/workers" },
    { method: "POST", path: "/v1/agl/workers/search" },
    { method: "GET", path: "/v1/agl/resources" },
    { method: "GET", path: "/v1/agl/spans" },
    { method: "POST", path: "/v1/agl/spans/search" },
    { method: "GET", path: "/v1/agl/statistics" },
  ];
}

const BAD_PARAMS: [string, string][] = [
  ["limit", "abc"],
  ["limit", "1e400"],
  ["limit", "-2"],
  ["limit", "1.5"],
  ["limit", ""],
  ["limit", "99999999999999999999"],
  ["limit", "0x10"],
  ["offset", "-1"],
  ["offset", "1e999"],
  ["offset", "NaN"],
  ["sort_by", "nope"],
  ["sort_by", "__proto__"],
  ["sort_order", "sideways"],
  ["filter_logic", "xor"],
  ["status_in", "bogus"],
  ["status_in", ""],
  ["rollout_id", ""],
  ["attempt_id", "latest"],
  ["__proto__", "1"],
  ["constructor", "x"],
  ["unknown", "1"],
  ["limit", "1"],
  ["offset", "9007199254740991"],
  ["name_contains", "\u0000"],
  ["rollout_id_contains", "%"],
];

const WEIRD_KEYS = [
  "__proto__",
  "constructor",
  "prototype",
  "toString",
  "hasOwnProperty",
  "",
  " ",
  "limit ",
  "\u0000",
  "💥",
  "a".repeat(300),
];
const BAD_CONTENT_TYPES = [
  "text/plain",
  "application/x-www-form-urlencoded",
  "multipart/form-data; boundary=zz",
  "application/xml",
  "application/jsonx",
  "json",
  "*/*",
  "application/json-seq",
];
const WRONG_METHODS = ["GET", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"];

function generator(s: Seeded, seed: number) {
  const rand = rng(seed).next;
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const writes = writeRoutes(s);
  const reads = readRoutes(s);

  /** One mutation of a write route's valid body that the route must refuse. */
  function refusedWrite(): FuzzRequest {
    const route = pick(writes);
    const body = route.valid();
    const base = { method: "POST", path: route.path, headers: { ...JSON_HEADERS }, expect: "refused" as Expect };
    const kind = Math.floor(rand() * 9);
    switch (kind) {
      case 0: {
        // A field of the wrong type (huge numbers included).
        const fields = Object.keys(route.fields);
        if (fields.length === 0) break;
        const f = pick(fields);
        const bad = pick(WRONG_FOR[route.fields[f]!]!);
        body[f] = bad;
        return { ...base, label: `wrong type ${f}=${jsonText(bad)}`, body: jsonText(body) };
      }
      case 1: {
        // An unknown key where the envelope is strict.
        if (!route.strict) break;
        const key = pick(WEIRD_KEYS);
        const text = jsonText(body).replace(/^\{/, `{${JSON.stringify(key)}:${jsonText(pick([1, "x", {}, { polluted: true }, null]))},`);
        return { ...base, label: `unknown key ${JSON.stringify(key)}`, body: text };
      }
      case 2: {
        if (route.required.length === 0) break;
        const f = pick(route.required);
        delete body[f];
        return { ...base, label: `missing ${f}`, body: jsonText(body) };
      }
      case 3: {
        // Nested past the limit, in any field (even one that takes any value).
        const f = pick([...Object.keys(body), "input", "metadata"]);
        const levels = pick([513, 600, 5_000, 60_000]);
        const text = jsonText({ ...body, [f]: "__DEEP__" }).replace('"__DEEP__"', rand() < 0.5 ? deep(levels) : deepObject(levels));
        return { ...base, label: `${levels} levels in ${f}`, body: text };
      }
      case 4: {
        // Truncated JSON: the valid body cut short (never at its full length).
        const text = jsonText(body);
        const cut = 1 + Math.floor(rand() * (text.length - 1));
        return { ...base, label: `truncated at ${cut}/${text.length}`, body: text.slice(0, cut) };
      }
      case 5: {
        const garbage = pick([
          "{",
          "}",
          "[",
          "nul",
          "{'input': 1}",
          '{"input": 1,}',
          "\uFEFF{}x",
          "NaN",
          '{"a":1}{"a":2}',
          "\u0000",
          "1 2",
          '"unterminated',
          '{"input":"\\ud800"',
          '{"k":01}',
        ]);
        return { ...base, label: `malformed ${JSON.stringify(garbage)}`, body: garbage };
      }
      case 6: {
        const type = pick(BAD_CONTENT_TYPES);
        return { ...base, label: `content-type ${type}`, headers: { "content-type": type }, body: jsonText(body) };
      }
      case 7: {
        if (!route.unknownIdPaths || route.unknownIdPaths.length === 0) break;
        const path = pick(route.unknownIdPaths);
        return { ...base, label: `unknown id ${path}`, path, body: jsonText(body) };
      }
      case 8: {
        // The body is not an object at all (null is not here: routes whose body is optional take it as none).
        const v = pick([1, "x", [], [body], true, -0]);
        return { ...base, label: `body ${jsonText(v)}`, body: jsonText(v) };
      }
    }
    // The mutation did not apply to this route: a body that is no JSON at all.
    return { ...base, label: "binary body", body: new Uint8Array([0xff, 0xfe, 0x00, 0x7b]) };
  }

  function next(): FuzzRequest {
    const r = rand();
    if (r < 0.55) return refusedWrite();
    if (r < 0.7) {
      // Bad (or odd) query parameters on a read.
      const route = pick(reads);
      const params = new URLSearchParams();
      if (route.path === "/v1/agl/spans") params.append("rollout_id", rand() < 0.8 ? s.rid : "ro-000000000000");
      for (let i = 0, n = 1 + Math.floor(rand() * 3); i < n; i++) {
        const [k, v] = pick(BAD_PARAMS);
        params.append(k, v);
      }
      if (route.method === "GET")
        return { label: `query ${params}`, method: "GET", path: `${route.path}?${params}`, headers: {}, expect: "read" };
      const body: Record<string, unknown> = route.path === "/v1/agl/spans/search" ? { rollout_id: s.rid } : {};
      for (const [k, v] of params) body[k] = rand() < 0.5 ? v : Number(v);
      return {
        label: `search ${JSON.stringify(body)}`,
        method: "POST",
        path: route.path,
        headers: { ...JSON_HEADERS },
        body: jsonText(body),
        expect: "read",
      };
    }
    if (r < 0.8) {
      // A wrong method on a known route, or an unknown route.
      const known = [
        ...writes.map((w) => w.path),
        "/v1/agl/health",
        "/v1/agl/statistics",
        `/v1/agl/rollouts/${s.rid}`,
        "/v1/agl/nope",
        "/v1/agl/rollouts/a/b/c/d",
        "/v1/agl",
        "/",
        "/v1/agl//rollouts",
        "/V1/AGL/ROLLOUTS",
      ];
      const path = pick(known);
      const method = pick(WRONG_METHODS);
      // GET and HEAD on read routes are fine reads; other methods on write routes must be refused.
      const isRead = method === "GET" || method === "HEAD" || method === "OPTIONS";
      const body = method === "GET" || method === "HEAD" ? undefined : '{"input":1}';
      return { label: `${method} ${path}`, method, path, headers: { ...JSON_HEADERS }, body, expect: isRead ? "read" : "refused" };
    }
    if (r < 0.88) {
      // Single-item GETs of unknown ids.
      const path = pick([
        "/v1/agl/rollouts/ro-000000000000",
        "/v1/agl/rollouts/ro-000000000000/attempts/latest",
        "/v1/agl/workers/nobody",
        "/v1/agl/resources/res-000000000000",
        `/v1/agl/rollouts/${encodeURIComponent("__proto__")}`,
        `/v1/agl/workers/${encodeURIComponent("constructor")}`,
        `/v1/agl/resources/${encodeURIComponent("toString")}`,
      ]);
      return { label: `GET ${path}`, method: "GET", path, headers: {}, expect: "unknown-get" };
    }
    // OTLP with bad payloads.
    const payload = pick<[string, string | Uint8Array<ArrayBuffer>, Record<string, string>]>([
      ["json garbage", "{not json", { "content-type": "application/json" }],
      ["json deep", `{"resourceSpans":${deep(700)}}`, { "content-type": "application/json" }],
      ["json wrong shape", '{"resourceSpans":[{"scopeSpans":"x"}]}', { "content-type": "application/json" }],
      [
        "json bad id",
        '{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz","spanId":12}]}]}]}',
        { "content-type": "application/json" },
      ],
      ["protobuf garbage", new Uint8Array([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01]), { "content-type": "application/x-protobuf" }],
      ["protobuf truncated", new Uint8Array([0x0a, 0x10, 0x0a, 0x05]), { "content-type": "application/x-protobuf" }],
      ["not gzip", new Uint8Array([1, 2, 3, 4]), { "content-type": "application/x-protobuf", "content-encoding": "gzip" }],
      ["bad encoding", "{}", { "content-type": "application/json", "content-encoding": "br" }],
      ["bad type", "{}", { "content-type": "text/plain" }],
    ]);
    return { label: `OTLP ${payload[0]}`, method: "POST", path: "/v1/traces", headers: payload[2], body: payload[1], expect: "refused" };
  }
  return next;
}

// ------------------------------------------------------------------------------------------------
// Checking answers

/** Problems with one answer (empty when it is as it must be). */
async function judge(req: FuzzRequest, res: Response): Promise<string[]> {
  const problems: string[] = [];
  const text = req.method === "HEAD" ? "" : await res.text();
  const s = res.status;
  if (s >= 500) problems.push(`a ${s}`);
  if (req.expect === "refused" && (s < 400 || s >= 500)) problems.push(`expected a refusal, got ${s}`);
  if (req.expect === "unknown-get" && !(s === 404 || (s === 200 && text === "null")))
    problems.push(`expected 404 or 200 null, got ${s} ${text.slice(0, 80)}`);
  if (s >= 400 && req.method !== "HEAD") {
    const type = res.headers.get("content-type") ?? "";
    if (req.path === "/v1/traces") {
      // OTLP answers a google.rpc.Status in the request's encoding.
      if (type.includes("json")) {
        const status = JSON.parse(text) as { code?: unknown; message?: unknown };
        if (typeof status.code !== "number" || typeof status.message !== "string")
          problems.push(`OTLP error without a Status: ${text.slice(0, 80)}`);
      } else if (!type.includes("protobuf")) problems.push(`OTLP error of type ${type}`);
    } else {
      if (!type.includes("application/json")) problems.push(`error answer of type ${type}`);
      try {
        const b = JSON.parse(text) as { detail?: unknown; error_type?: unknown; issues?: unknown };
        if (typeof b.detail !== "string" || typeof b.error_type !== "string")
          problems.push(`error without detail/error_type: ${text.slice(0, 80)}`);
        if (b.error_type === "ValidationError" && !Array.isArray(b.issues)) problems.push("ValidationError without issues");
      } catch {
        problems.push(`error answer that is not JSON: ${text.slice(0, 80)}`);
      }
    }
  }
  return problems;
}

const describeRequest = (r: FuzzRequest) =>
  `${r.label}: ${r.method} ${r.path} ${JSON.stringify(r.headers)} ${typeof r.body === "string" ? r.body.slice(0, 200) : r.body ? `<${r.body.length} bytes>` : ""}`;

/** A logger that keeps what the server reports as errors (a 500 or a failed request). */
function recordingLogger(): LogWriter & { errors: string[] } {
  const errors: string[] = [];
  return { errors, debug() {}, info() {}, warning() {}, error: (m) => errors.push(m) };
}

// ------------------------------------------------------------------------------------------------

describe(`store server fuzz (seed ${SEED})`, () => {
  it.each(["memory", "libSQL"] as const)(
    "%s store: bad requests in process: no 5xx, JSON errors, nothing stored or changed",
    async (kind) => {
      const seeded = await seededStore(kind);
      const log = recordingLogger();
      const app = createStoreApp(seeded.store, { log });
      const before = await snapshot(seeded.store);
      const next = generator(seeded, SEED);
      const failures: string[] = [];
      const statuses = new Map<number, number>();
      for (let i = 0; i < IN_PROCESS_REQUESTS[kind]; i++) {
        const req = next();
        const res = await app.request(req.path, { method: req.method, headers: req.headers, body: req.body });
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        const problems = await judge(req, res);
        if (problems.length > 0) failures.push(`#${i} ${describeRequest(req)} -> ${problems.join("; ")}`);
      }
      expect(failures.slice(0, 20), `seed ${SEED}`).toEqual([]);
      expect(log.errors.slice(0, 5)).toEqual([]);
      expect(await snapshot(seeded.store)).toBe(before);
      // The requests were refused in all the expected ways.
      for (const status of [400, 404, 415])
        expect(statuses.get(status) ?? 0, `${status} in ${JSON.stringify([...statuses])}`).toBeGreaterThan(5);
      // The server still works.
      expect((await app.request("/v1/agl/health")).status).toBe(200);
      const ok = await app.request("/v1/agl/rollouts", { method: "POST", headers: JSON_HEADERS, body: '{"input":"after"}' });
      expect(ok.status).toBe(201);
      await seeded.store.close();
    },
    120_000,
  );

  describe("over real HTTP", () => {
    let seeded: Seeded;
    let server: InProcessServer;
    const log = recordingLogger();
    beforeAll(async () => {
      seeded = await seededStore();
      server = await startInProcess(seeded.store, { log });
    });
    afterAll(async () => {
      await server.close();
      await seeded.store.close();
    });

    /** Writes raw bytes to the server and returns what came back before it closed (or a short wait ran out). */
    const raw = (bytes: string, endEarly: boolean): Promise<string> =>
      new Promise((resolve) => {
        const { port, hostname } = new URL(server.url);
        const socket = connect(Number(port), hostname);
        let got = "";
        const timer = setTimeout(() => socket.destroy(), 2_000);
        socket.on("data", (d) => (got += d.toString()));
        socket.on("close", () => {
          clearTimeout(timer);
          resolve(got);
        });
        socket.on("error", () => {});
        socket.write(bytes, () => {
          if (endEarly) socket.end();
        });
      });

    it(`${HTTP_REQUESTS} bad requests and raw socket abuse: no 5xx, nothing changed, the server keeps serving`, async () => {
      const before = await snapshot(seeded.store);
      const next = generator(seeded, SEED + 1);
      const failures: string[] = [];
      for (let i = 0; i < HTTP_REQUESTS; i++) {
        const req = next();
        const res = await fetch(`${server.url}${req.path}`, {
          method: req.method,
          headers: req.headers,
          body: req.body as string | undefined,
        });
        const problems = await judge(req, res);
        if (problems.length > 0) failures.push(`#${i} ${describeRequest(req)} -> ${problems.join("; ")}`);
      }
      expect(failures.slice(0, 20), `seed ${SEED + 1}`).toEqual([]);

      const body = `{"input":{"text":"${"x".repeat(200)}"}}`;
      const abuse: [string, string, boolean][] = [
        [
          "a body cut short (Content-Length larger than sent)",
          `POST /v1/agl/rollouts HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 50)}`,
          true,
        ],
        [
          "a chunked body cut mid-chunk",
          `POST /v1/agl/rollouts HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${(body.length).toString(16)}\r\n${body.slice(0, 30)}`,
          true,
        ],
        ["a garbage request line", "BLAH / HTTP/9.9\r\n\r\n", true],
        ["a bad header", "GET /v1/agl/health HTTP/1.1\r\nHost: localhost\r\nBad Header: \u0001\r\n\r\n", true],
        [
          "a Content-Length that is not a number",
          "POST /v1/agl/rollouts HTTP/1.1\r\nHost: localhost\r\nContent-Length: lots\r\n\r\n{}",
          true,
        ],
        [
          "two Content-Lengths",
          `POST /v1/agl/rollouts HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 5\r\nContent-Length: 15\r\n\r\n{"input":1}`,
          true,
        ],
      ];
      for (const [label, bytes, endEarly] of abuse) {
        const answer = await raw(bytes, endEarly);
        const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0);
        expect(status >= 500, `${label}: ${answer.slice(0, 100)}`).toBe(false);
      }
      // Give the server a moment to notice the closed sockets and finish those requests.
      await new Promise((r) => setTimeout(r, 200));
      expect(await snapshot(seeded.store)).toBe(before);
      expect(log.errors.slice(0, 5)).toEqual([]);
      expect((await fetch(`${server.url}/v1/agl/health`)).status).toBe(200);
    }, 120_000);
  });
});
