/**
 * `LightningStoreClient.finishAttempt` against a server process under Node, Deno and Bun (memory store):
 * one request stores the spans, sets the status and claims the next rollout; a failing part comes back
 * as its own typed error with `finishFailure` naming what was stored.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LightningStoreClient, finishFailure } from "../../src/client/index.ts";
import { NotFoundError, ValidationError, spanFromAttributes, type AttemptedRollout, type Span } from "../../src/types/index.ts";
import { startServerProcess, type ServerProcess } from "../server/processes.ts";
import { RUNTIMES } from "../runtimes.ts";

const unnumbered = (r: AttemptedRollout, name: string) =>
  ({
    ...spanFromAttributes({ rollout_id: r.rollout_id, attempt_id: r.attempt.attempt_id, sequence_id: 1, name }),
    sequence_id: null,
  }) as unknown as Span;

for (const runtime of RUNTIMES) {
  describe(`finishAttempt -> ${runtime} server process`, () => {
    let server: ServerProcess;
    let client: LightningStoreClient;
    beforeAll(async () => {
      server = await startServerProcess(runtime, ["--port", "0", "--db", "memory", "--log-level", "warning"]);
      client = new LightningStoreClient(server.url, { retryDelays: [], healthRetryDelays: [] });
    }, 90_000);
    afterAll(async () => {
      await client?.close();
      expect(await server.stop("SIGTERM")).toBe(0);
    });

    it("spans, status and the next claim in one request; failing parts typed, earlier parts kept", async () => {
      const tag = `${runtime}-${Date.now()}`;
      await client.enqueueRollout(`${tag}-1`);
      const second = await client.enqueueRollout(`${tag}-2`);
      const first = (await client.dequeueRollout({ worker_id: `W-${tag}` }))!;
      const ids = { rollout_id: first.rollout_id, attempt_id: first.attempt.attempt_id };

      const done = await client.finishAttempt({
        ...ids,
        spans: [unnumbered(first, "a"), unnumbered(first, "b")],
        attempt: { status: "succeeded" },
        claim: { worker_id: `W-${tag}` },
      });
      expect(done.sequence_ids).toEqual([1, 2]);
      expect(done.attempt.status).toBe("succeeded");
      expect(done.next?.rollout_id).toBe(second.rollout_id);
      expect(done.next?.attempt.worker_id).toBe(`W-${tag}`);
      expect((await client.querySpans(first.rollout_id)).items.map((s) => [s.name, s.sequence_id])).toEqual([
        ["a", 1],
        ["b", 2],
      ]);

      const next = done.next!;
      const lost = await client
        .finishAttempt({
          rollout_id: next.rollout_id,
          attempt_id: "at-00000000",
          spans: [unnumbered(next, "kept")],
          attempt: { status: "failed" },
          claim: {},
        })
        .catch((e: unknown) => e);
      expect(lost).toBeInstanceOf(NotFoundError);
      expect(finishFailure(lost)).toEqual({ failed: "attempt", completed: ["spans"] });
      expect((await client.querySpans(next.rollout_id)).items.map((s) => s.name)).toEqual(["kept"]);

      const bad = await client
        .finishAttempt({ rollout_id: next.rollout_id, attempt_id: next.attempt.attempt_id, attempt: { status: "done" as never } })
        .catch((e: unknown) => e);
      expect(bad).toBeInstanceOf(ValidationError);
      expect((bad as ValidationError).issues[0]!.path).toEqual(["attempt", "status"]);
      expect(finishFailure(bad)).toBeNull();
    }, 30_000);
  });
}
