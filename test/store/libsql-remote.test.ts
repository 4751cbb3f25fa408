/**
 * The store on a libSQL server URL (`http://`, what `libsql://` and `https://` use too), end to end:
 * `@libsql/client`'s web build speaking Hrana over HTTP to the test server of hrana-server.ts, which keeps
 * its data in SQLite files. The conformance suite runs unchanged against it; then the things a shared
 * server is for: a token it does not know is refused, several machines (store instances with their own
 * connections) claim each rollout once, and the data is in the server's database.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LibsqlLightningStore } from "../../src/store/libsql/index.ts";
import { spanFromAttributes, type AttemptedRollout } from "../../src/types/index.ts";
import { runStoreConformance } from "./conformance.ts";
import { startHranaServer } from "./hrana-server.ts";

const dir = mkdtempSync(join(tmpdir(), "lightning-remote-"));
// Every token names its own database on the server: "db-<n>".
const server = await startHranaServer((token) => (/^db-\d+$/.test(token) ? join(dir, `${token}.db`) : undefined));
let n = 0;
afterAll(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

runStoreConformance(
  "LibsqlLightningStore(http:// libSQL server)",
  ({ clock }) => LibsqlLightningStore.open(server.url, { authToken: `db-${n++}`, clock, scanDebounceSeconds: 0 }),
  { timingSlackMs: 50, concurrency: 40 },
);

describe("LibsqlLightningStore on a libSQL server", () => {
  it("is refused with the server's 401 when its token is wrong", async () => {
    const before = server.requests;
    await expect(LibsqlLightningStore.open(server.url, { authToken: "not-a-db" })).rejects.toThrow(/401/);
    expect(server.requests).toBe(before);
  });

  it("lets several machines share one database: every rollout is claimed exactly once", async () => {
    const token = `db-${n++}`;
    const machines = await Promise.all([0, 1, 2].map(() => LibsqlLightningStore.open(server.url, { authToken: token })));
    const total = 60;
    const enqueued = await machines[0]!.enqueueManyRollouts(Array.from({ length: total }, (_, i) => ({ input: { i } })));
    const claims: AttemptedRollout[] = [];
    await Promise.all(
      machines.flatMap((m, k) =>
        [0, 1].map(async (w) => {
          for (;;) {
            const got = await m.dequeueRollout({ worker_id: `m${k}-w${w}` });
            if (!got) return;
            claims.push(got);
          }
        }),
      ),
    );
    expect(claims.map((c) => c.rollout_id).sort()).toEqual(enqueued.map((r) => r.rollout_id).sort());
    // Every machine did some of the work, so the claims really raced.
    for (let k = 0; k < machines.length; k++) expect(claims.some((c) => c.attempt.worker_id?.startsWith(`m${k}-`))).toBe(true);
    for (const m of machines) await m.close();
  });

  it("keeps its data in the server's database, and a failing batch there commits nothing", async () => {
    const token = `db-${n++}`;
    const remote = await LibsqlLightningStore.open(server.url, { authToken: token });
    const ar = await remote.startRollout({ q: "remote" });
    const span = (k: number, rolloutId = ar.rollout_id) =>
      spanFromAttributes({ rollout_id: rolloutId, attempt_id: ar.attempt.attempt_id, sequence_id: k, name: `s${k}` });
    await remote.addManySpans([span(1), span(2)]);
    // The second span names a rollout that does not exist: the whole batch fails and stores nothing.
    await expect(remote.addManySpans([span(3), span(4, "ro-000000000000")])).rejects.toThrow(/not found/i);
    await remote.close();
    // The server's own file, opened directly.
    const local = await LibsqlLightningStore.open(`file:${join(dir, `${token}.db`)}`);
    expect((await local.getRolloutById(ar.rollout_id))?.status).toBe("running");
    expect((await local.querySpans(ar.rollout_id)).items.map((s) => s.name)).toEqual(["s1", "s2"]);
    await local.close();
  });
});
