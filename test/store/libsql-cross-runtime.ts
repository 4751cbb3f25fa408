/**
 * Run under Node (tsx), Deno and Bun by libsql-runtimes.test.ts: opens `file:` databases in the
 * directory given as the last argument (the embedded default) through both drivers (the native binding
 * and `@libsql/client`, whose bare import could pick the web build on Deno, which rejects `file:`),
 * runs one full rollout lifecycle on each, reopens the file and prints a JSON report on the last line.
 * With LIBSQL_SERVER_URL and LIBSQL_SERVER_TOKEN set it does the same on that libSQL server URL.
 */
import { join } from "node:path";
import { LibsqlLightningStore } from "../../src/store/index.ts";
import { spanFromAttributes } from "../../src/types/index.ts";

const g = globalThis as { Deno?: unknown; Bun?: unknown };
const runtime = g.Deno ? "deno" : g.Bun ? "bun" : "node";
const dir = process.argv[process.argv.length - 1]!;

async function lifecycle(driver: "native" | "client" | "remote") {
  const remote = driver === "remote";
  const url = remote ? process.env.LIBSQL_SERVER_URL! : `file:${join(dir, `${runtime}-${driver}.db`)}`;
  const options = remote ? { authToken: process.env.LIBSQL_SERVER_TOKEN } : { driver };
  const store = await LibsqlLightningStore.open(url, options);
  const background = store.checkpointsInBackground;
  await store.enqueueRollout({ question: "2 + 2" });
  const claimed = await store.dequeueRollout({ worker_id: `worker-${runtime}` });
  if (!claimed) throw new Error("nothing to dequeue");
  const spans = [1, 2, 3].map((k) =>
    spanFromAttributes({ rollout_id: claimed.rollout_id, attempt_id: claimed.attempt.attempt_id, sequence_id: k, name: `step-${k}` }),
  );
  await store.addManySpans(spans.slice(0, 2));
  await store.addSpan(spans[2]!);
  await store.updateAttempt(claimed.rollout_id, "latest", { status: "succeeded" });
  await store.close();

  const reopened = await LibsqlLightningStore.open(url, options);
  const rollout = await reopened.getRolloutById(claimed.rollout_id);
  const stored = await reopened.querySpans(claimed.rollout_id);
  const worker = await reopened.getWorkerById(`worker-${runtime}`);
  await reopened.close();
  return {
    driver,
    background,
    status: rollout?.status ?? null,
    spanNames: stored.items.map((s) => s.name),
    workerStatus: worker?.status ?? null,
  };
}

const results = [await lifecycle("native"), await lifecycle("client")];
if (process.env.LIBSQL_SERVER_URL) results.push(await lifecycle("remote"));
console.log(JSON.stringify({ runtime, results }));
