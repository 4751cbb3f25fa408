/**
 * A child process for the multi-process libSQL tests (libsql-processes.test.ts), run with
 * `node --import tsx test/store/libsql-child.ts <mode> <url> [args]`. It prints "ready", waits for a
 * line on stdin, then works, printing one line per result (stdout to a pipe is synchronous on Linux,
 * so a printed line means the result was acknowledged before anything that follows).
 * - `dequeue <url> <worker>`: dequeues until the queue is empty; prints each claimed rollout id, then "done".
 * - `spans <url> <rollout> <attempt> <callers>`: adds spans forever from `callers` concurrent loops;
 *   prints each span_id once its addSpan has resolved.
 */
import { createInterface } from "node:readline";
import { LibsqlLightningStore } from "../../src/store/index.ts";
import { spanFromAttributes } from "../../src/types/index.ts";

const [mode, url, ...rest] = process.argv.slice(2);
const store = await LibsqlLightningStore.open(url!);
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
process.stdout.write("ready\n");
await lines.next();

if (mode === "dequeue") {
  const worker = rest[0]!;
  for (;;) {
    const claimed = await store.dequeueManyRollouts({ limit: 1 + Math.floor(Math.random() * 3), worker_id: worker });
    if (claimed.length === 0) break;
    process.stdout.write(claimed.map((c) => c.rollout_id).join("\n") + "\n");
  }
  process.stdout.write("done\n");
  await store.close();
  process.exit(0);
} else if (mode === "spans") {
  const [rolloutId, attemptId, callers] = rest as [string, string, string];
  let seq = 0;
  await Promise.all(
    Array.from({ length: Number(callers) }, async () => {
      for (;;) {
        const n = ++seq;
        const span = spanFromAttributes({
          rollout_id: rolloutId,
          attempt_id: attemptId,
          sequence_id: n,
          span_id: n.toString(16).padStart(16, "0"),
          name: "llm.call",
          attributes: { "gen_ai.prompt.0.content": "x".repeat(200), n },
        });
        if ((await store.addSpan(span)) === null) throw new Error(`span ${n} was a duplicate`);
        process.stdout.write(`${span.span_id}\n`);
      }
    }),
  );
} else {
  throw new Error(`unknown mode ${mode}`);
}
