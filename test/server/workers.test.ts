/**
 * `agl store --workers N` (node): processes serving one port and one libSQL file. Each request below
 * that must reach a given worker opens a connection of its own and reads the `agl-worker` header of
 * the answer, which names the worker that answered ("<place> (pid <pid>)").
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LightningStoreClient } from "../../src/client/index.ts";
import { WORKER_HEADER } from "../../src/server/app.ts";
import { LibsqlLightningStore } from "../../src/store/libsql/index.ts";
import type { AttemptedRollout } from "../../src/types/index.ts";
import { parsePrometheusText, sampleValue } from "../metrics/prometheus-text.ts";
import { aglCommand, RUNTIMES, type Runtime } from "../runtimes.ts";
import { type ServerProcess, startServerProcess } from "./processes.ts";

const dir = mkdtempSync(join(tmpdir(), "store-workers-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let files = 0;
const newDb = () => `file:${join(dir, `store-${files++}.db`)}`;

interface Answer {
  status: number;
  worker: string;
  replayed: boolean;
  body: unknown;
}

/** One request on a connection of its own (so the cluster may hand it to any worker). */
function onNewConnection(
  base: string,
  method: "GET" | "POST",
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const text = body === undefined ? undefined : JSON.stringify(body);
    const req = request(
      `${base}/v1/agl${path}`,
      { method, agent: false, headers: { ...(text === undefined ? {} : { "content-type": "application/json" }), ...headers } },
      (res) => {
        let data = "";
        res.setEncoding("utf8");
        res.on("data", (d: string) => (data += d));
        res.on("end", () =>
          resolve({
            status: res.statusCode ?? 0,
            worker: String(res.headers[WORKER_HEADER] ?? ""),
            replayed: res.headers["idempotent-replayed"] === "true",
            body: data === "" ? undefined : String(res.headers["content-type"]).includes("json") ? (JSON.parse(data) as unknown) : data,
          }),
        );
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(text);
  });
}

const pidOf = (worker: string): number => Number(/pid (\d+)/.exec(worker)?.[1] ?? Number.NaN);

/**
 * The workers that answer health checks, each on a new connection, until two different ones have (or
 * 200 tries): where the workers accept connections themselves (Deno, Bun) the kernel picks, and a busy
 * machine may hand many in a row to the same one.
 */
async function workersAnswering(base: string): Promise<Set<string>> {
  const seen = new Set<string>();
  for (let i = 0; i < 200 && seen.size < 2; i++) seen.add((await onNewConnection(base, "GET", "/health")).worker);
  return seen;
}

async function startCluster(runtime: Runtime = "node"): Promise<{ server: ServerProcess; db: string }> {
  const db = newDb();
  const server = await startServerProcess(runtime, ["--workers", "2", "--port", "0", "--db", db, "--log-level", "info"]);
  return { server, db };
}

/** Resolves once `cond` holds (looked at every 50 ms); throws with the server's output after 60 s. */
async function until(server: ServerProcess, cond: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}:\n${server.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** How many "worker ... serving" lines the primary has logged. */
const servingLines = (server: ServerProcess): number => (server.output().match(/worker \d \(pid \d+\) of 2 serving/g) ?? []).length;

/** Runs `agl store` with `args` to its end: exit code and what it printed. */
function runAgl(args: string[]): Promise<{ code: number | null; out: string }> {
  const [cmd, argv] = aglCommand("node", args);
  return new Promise((resolve) => {
    execFile(cmd, argv, { env: { ...process.env, NO_COLOR: "1" }, timeout: 60_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? null) : 0, out: stdout + stderr }),
    );
  });
}

describe("agl store --workers 2", () => {
  it("refuses a database that lives inside one process, in one line", async () => {
    for (const db of ["memory", ":memory:"]) {
      const r = await runAgl(["store", "--workers", "2", "--port", "0", "--db", db]);
      expect(r.code).toBe(1);
      expect(r.out.trim().split("\n")).toEqual([
        `agl store: --workers 2 needs a database that the workers share, and ${JSON.stringify(db)} lives inside one process: give --db file:PATH or a libSQL server URL`,
      ]);
    }
  }, 60_000);

  it.each(RUNTIMES)(
    "under %s: both workers answer, a retry with the same Idempotency-Key to the other worker gets the first answer, and a killed worker is replaced",
    async (runtime) => {
      const { server } = await startCluster(runtime);
      try {
        expect((await workersAnswering(server.url)).size).toBe(2);
        const body = { rollouts: [{ input: { task: "once" } }] };
        const headers = { "idempotency-key": "retry-me" };
        const first = await onNewConnection(server.url, "POST", "/queues/rollouts/enqueue", body, headers);
        expect(first.status).toBe(201);
        let retry: Answer;
        let tries = 0;
        do retry = await onNewConnection(server.url, "POST", "/queues/rollouts/enqueue", body, headers);
        while (retry.worker === first.worker && ++tries < 200);
        expect(retry.worker).not.toBe(first.worker);
        expect(retry).toMatchObject({ status: 201, replayed: true, body: first.body });
        // Written once: one rollout in the store.
        const client = new LightningStoreClient(server.url);
        expect((await client.queryRollouts()).total).toBe(1);
        await client.close();
        // The same key with another body is refused wherever it lands.
        const other = await onNewConnection(server.url, "POST", "/queues/rollouts/enqueue", { rollouts: [{ input: 2 }] }, headers);
        expect(other.status).toBe(422);
        process.kill(pidOf(first.worker), "SIGKILL");
        await until(server, () => servingLines(server) >= 3, "a new worker");
        const serving = await workersAnswering(server.url);
        expect(serving.size).toBe(2);
        expect(serving.has(first.worker)).toBe(false);
      } finally {
        expect(await server.stop("SIGTERM"), server.output()).toBe(0);
      }
    },
    120_000,
  );

  it("a wait held by one worker wakes as soon as the other worker finishes the rollout", async () => {
    const { server } = await startCluster();
    const client = new LightningStoreClient(server.url);
    try {
      const lags: number[] = [];
      // Only waits and finishes answered by different workers count; the cluster picks the worker.
      for (let i = 0; i < 40 && lags.length < 5; i++) {
        const r = await client.startRollout({ i });
        const wait = onNewConnection(server.url, "POST", "/waits/rollouts", { rollout_ids: [r.rollout_id], timeout: 10 });
        await new Promise((resolve) => setTimeout(resolve, 150));
        const finish = await onNewConnection(server.url, "POST", `/rollouts/${r.rollout_id}/attempts/${r.attempt.attempt_id}`, {
          status: "succeeded",
        });
        const finishedAt = performance.now();
        const waited = await wait;
        expect(finish.status).toBe(200);
        expect((waited.body as { rollout_id: string }[]).map((x) => x.rollout_id)).toEqual([r.rollout_id]);
        if (waited.worker !== finish.worker) lags.push(performance.now() - finishedAt);
      }
      expect(lags).toHaveLength(5);
      // A wait that only polled (every second) would lag by half a second on average.
      expect(Math.max(...lags)).toBeLessThan(400);
    } finally {
      await client.close();
      expect(await server.stop("SIGTERM"), server.output()).toBe(0);
    }
  }, 120_000);

  it("claims every rollout exactly once under concurrent dequeues from many clients", async () => {
    const { server } = await startCluster();
    const setup = new LightningStoreClient(server.url);
    const answeredBy = new Set<string>();
    const recordingFetch: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      const w = res.headers.get(WORKER_HEADER);
      if (w) answeredBy.add(w);
      return res;
    };
    const clients = Array.from({ length: 16 }, () => new LightningStoreClient(server.url, { fetch: recordingFetch }));
    try {
      const total = 400;
      const enqueued = await setup.enqueueManyRollouts(Array.from({ length: total }, (_, i) => ({ input: i })));
      const claims: AttemptedRollout[] = [];
      await Promise.all(
        clients.map(async (c, k) => {
          for (;;) {
            const got = await c.dequeueManyRollouts({ limit: 1 + (k % 3), worker_id: `runner-${k}` });
            if (got.length === 0) return;
            claims.push(...got);
          }
        }),
      );
      const ids = claims.map((r) => r.rollout_id);
      expect(new Set(ids).size).toBe(ids.length);
      expect([...ids].sort()).toEqual(enqueued.map((r) => r.rollout_id).sort());
      expect(answeredBy.size).toBe(2);
    } finally {
      await Promise.all([setup, ...clients].map((c) => c.close()));
      expect(await server.stop("SIGTERM"), server.output()).toBe(0);
    }
  }, 120_000);

  it("a SIGKILLed worker loses no acknowledged write, the others keep serving, and the primary starts another", async () => {
    const { server, db } = await startCluster();
    const acknowledged: string[] = [];
    const failures: unknown[] = [];
    let writing = true;
    const writer = async (k: number) => {
      const client = new LightningStoreClient(server.url);
      try {
        for (let i = 0; writing; i++) {
          try {
            acknowledged.push((await client.enqueueRollout({ k, i })).rollout_id);
          } catch (e) {
            failures.push(e);
          }
        }
      } finally {
        await client.close();
      }
    };
    const writers = Array.from({ length: 6 }, (_, k) => writer(k));
    try {
      await until(server, () => acknowledged.length >= 100, "100 writes");
      const victim = (await onNewConnection(server.url, "GET", "/health")).worker;
      const before = acknowledged.length;
      process.kill(pidOf(victim), "SIGKILL");
      await until(
        server,
        () => server.output().includes(`worker ${victim} of 2 ended (SIGKILL); starting another`),
        "the primary to see the kill",
      );
      // The other worker serves meanwhile, then a new one joins.
      await until(server, () => acknowledged.length >= before + 100, "100 more writes");
      await until(server, () => servingLines(server) >= 3, "a new worker");
      await until(server, () => acknowledged.length >= before + 200, "writes after the new worker started");
      writing = false;
      await Promise.all(writers);
      expect(failures).toEqual([]);
      const serving = await workersAnswering(server.url);
      expect(serving.size).toBe(2);
      expect(serving.has(victim)).toBe(false);
    } finally {
      writing = false;
      await Promise.all(writers);
      expect(await server.stop("SIGTERM"), server.output()).toBe(0);
    }
    // Every acknowledged rollout is in the file, read after the cluster has stopped.
    const store = await LibsqlLightningStore.open(db);
    try {
      const found = await store.queryRollouts({ rollout_id_in: acknowledged, limit: acknowledged.length });
      expect(found.items.map((r) => r.rollout_id).sort()).toEqual([...acknowledged].sort());
      expect(await store.integrityCheck()).toEqual(["ok"]);
    } finally {
      await store.close();
    }
  }, 180_000);

  it.each(RUNTIMES)(
    "under %s: a scrape of either worker adds up both workers' metrics: their requests and what clients pushed to each",
    async (runtime) => {
      const { server } = await startCluster(runtime);
      try {
        const counter = {
          name: "agent.tool_calls",
          type: "counter",
          label_names: ["tool"],
          samples: [{ labels: { tool: "calc" }, value: 1 }],
        };
        const pushedTo = new Set<string>();
        let pushes = 0;
        for (let i = 0; i < 200 && (pushedTo.size < 2 || pushes < 4); i++) {
          const a = await onNewConnection(server.url, "POST", "/metrics/push", { source: `runner-${i}`, metrics: [counter] });
          expect(a.status).toBe(200);
          pushedTo.add(a.worker);
          pushes++;
        }
        expect(pushedTo.size).toBe(2);
        const scrapedBy = new Set<string>();
        for (let i = 0; i < 200 && scrapedBy.size < 2; i++) {
          const a = await onNewConnection(server.url, "GET", "/prometheus/");
          expect(a.status).toBe(200);
          scrapedBy.add(a.worker);
          const f = parsePrometheusText(a.body as string);
          expect(sampleValue(f, "agent_tool_calls_total", { tool: "calc" })).toBe(pushes);
          expect(sampleValue(f, "agl_http_total", { path: "/v1/agl/metrics/push", method: "POST", status: "200" })).toBe(pushes);
          expect(sampleValue(f, "agl_queue_depth")).toBe(0);
        }
        expect(scrapedBy.size).toBe(2);
      } finally {
        expect(await server.stop("SIGTERM"), server.output()).toBe(0);
      }
    },
    120_000,
  );
});
