/**
 * Run by test/platform/cluster.test.ts: a primary (forkClusterWorker) kills its worker and sends to it
 * until its exit is seen. It must end with exit code 0: a send to a worker that has just gone is dropped,
 * not an 'error' event that ends the primary.
 */
import cluster from "node:cluster";
import { forkClusterWorker } from "../../src/platform/node-cluster.ts";

if (cluster.isPrimary) {
  const worker = forkClusterWorker();
  const errors: Error[] = [];
  worker.onError((e) => errors.push(e));
  let exited = false;
  let sends = 0;
  worker.onExit(() => {
    exited = true;
  });
  worker.onMessage(() => {
    worker.kill("SIGKILL");
    // the worker dies while this turn goes on: the channel still looks open, and the writes meet a closed pipe
    const until = Date.now() + 200;
    while (Date.now() < until) {}
    for (let i = 0; i < 50; i++) worker.send({ n: ++sends, pad: "x".repeat(100 * 1024) });
    const timer = setInterval(() => {
      worker.send({ n: ++sends });
      if (exited) {
        clearInterval(timer);
        console.log(`sent ${sends} after the kill; exit seen; other channel errors: ${errors.length}`);
      }
    }, 1);
  });
} else {
  process.send?.("ready");
  setInterval(() => {}, 1_000);
}
