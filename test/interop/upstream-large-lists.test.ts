/**
 * Upstream's Python client does not page: `query_rollouts()` sends `limit=-1` and `query_workers()` sends
 * no limit, and upstream's server answers every match. Replayed against `agl store` (upstream-client.ts)
 * on a store holding more than the page caps Lightning TS once had (10,000 items for -1, 1,000 without a
 * limit), each list comes back complete in one answer, under Node, Deno and Bun, in memory and in libSQL.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LightningStoreClient } from "../../src/client/index.ts";
import { startServerProcess, type ServerProcess } from "../server/processes.ts";
import { RUNTIMES, type Runtime } from "../runtimes.ts";
import { UpstreamStoreClient } from "./upstream-client.ts";

const ROLLOUTS = 20_000;
const WORKERS = 2_000;

const cases: [Runtime, string][] = [...RUNTIMES.map((r): [Runtime, string] => [r, "memory"]), ["node", ":memory:"]];

describe.each(cases)("upstream's Python client lists a large store: %s server, --db %s", (runtime, db) => {
  let server: ServerProcess;
  let py: UpstreamStoreClient;

  beforeAll(async () => {
    server = await startServerProcess(runtime, ["--port", "0", "--db", db, "--log-level", "warning"]);
    py = new UpstreamStoreClient(server.url);
    const ts = new LightningStoreClient(server.url);
    for (let i = 0; i < ROLLOUTS; i += 5_000)
      await ts.enqueueManyRollouts(Array.from({ length: 5_000 }, (_, k) => ({ input: { i: i + k }, metadata: { batch: i } })));
    await Promise.all(Array.from({ length: WORKERS }, (_, i) => ts.updateWorker(`Worker-${i}`, { host: `h${i % 7}` })));
    await ts.close();
  }, 180_000);
  afterAll(async () => {
    expect(await server?.stop("SIGTERM")).toBe(0);
  });

  it(`query_rollouts() (limit=-1) gets all ${ROLLOUTS} rollouts in one answer`, async () => {
    const page = await py.query_rollouts();
    const sent = py.exchanges.at(-1)!.request;
    expect(sent.body).toBe('{"limit": -1, "offset": 0, "filter_logic": "and"}');
    expect([page.items.length, page.limit, page.offset, page.total]).toEqual([ROLLOUTS, -1, 0, ROLLOUTS]);
    expect(page.items.map((r) => (r.input as { i: number }).i)).toEqual(Array.from({ length: ROLLOUTS }, (_, i) => i));
    // A filter that matches most of them, and an offset: still every match from there on.
    const queued = await py.query_rollouts({ status_in: ["queuing"], offset: 15_000 });
    expect([queued.items.length, queued.total]).toEqual([ROLLOUTS - 15_000, ROLLOUTS]);
  }, 120_000);

  it(`query_workers() (no limit) gets all ${WORKERS} workers in one answer`, async () => {
    const page = await py.query_workers();
    expect(py.exchanges.at(-1)!.request.body).toBe('{"filter_logic": "and"}');
    expect([page.items.length, page.limit, page.offset, page.total]).toEqual([WORKERS, -1, 0, WORKERS]);
    expect(new Set(page.items.map((w) => w.worker_id))).toEqual(new Set(Array.from({ length: WORKERS }, (_, i) => `Worker-${i}`)));
    const sorted = await py.query_workers({ sort_by: "worker_id", worker_id_contains: "Worker-1" });
    expect(sorted.items.map((w) => w.worker_id)).toEqual(
      Array.from({ length: WORKERS }, (_, i) => `Worker-${i}`)
        .filter((id) => id.includes("Worker-1"))
        .sort(),
    );
  }, 120_000);
});
