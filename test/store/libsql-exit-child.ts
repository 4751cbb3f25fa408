/**
 * Child for libsql-checkpointer.test.ts: opens a file store, commits for `ms` (so the background
 * checkpointer is busy), never closes it, and exits naturally or through process.exit().
 * Usage: <runtime> libsql-exit-child.ts <db path> natural|exit <ms>
 */
import process from "node:process";
import { LibsqlLightningStore } from "../../src/store/index.ts";

const [path, how, ms] = process.argv.slice(-3) as [string, string, string];
const store = await LibsqlLightningStore.open(`file:${path}`);
if (!store.checkpointsInBackground) throw new Error("expected background checkpoints");
const until = Date.now() + Number(ms);
let n = 0;
while (Date.now() < until) await store.enqueueRollout({ n: n++ });
console.log(`wrote ${n}`);
if (how === "exit") process.exit(0);
