/**
 * Trains the arithmetic agent with the Baseline algorithm.
 *
 *   npx tsx examples/arithmetic/train.ts            # shared-memory strategy (one process)
 *   npx tsx examples/arithmetic/train.ts cs         # client-server strategy (runner child processes)
 *
 * Also runs under `npx deno run -A` and `npx bun`. Prints the mean reward of the finished rollouts.
 */
import { Baseline } from "../../src/algorithm/index.ts";
import { PortInUseError, Trainer } from "../../src/trainer/index.ts";
import { arithmeticAgent, goodTemplate, makeTasks } from "./agent.ts";

const kind = (globalThis as { process?: { argv: string[] } }).process?.argv[2] === "cs" ? "cs" : "shm";
const baseline = new Baseline({ pollingInterval: 0.2, maxQueueLength: 8, spanVerbosity: "none" });
const trainer = new Trainer({
  algorithm: baseline,
  nRunners: 2,
  strategy: kind === "cs" ? { type: "cs" } : { type: "shm", main_thread: "algorithm" },
  runner: { type: "LitAgentRunner", poll_interval: 0.05, heartbeat_interval: 1 },
  initialResources: { prompt: goodTemplate },
});
const tasks = makeTasks(24);
try {
  await trainer.fit(arithmeticAgent, tasks.slice(0, 16), { valDataset: tasks.slice(16) });
} catch (e) {
  // `cs` serves the store on AGL_SERVER_PORT (4747, as `agl store`): a busy port is one line, not a stack.
  if (!(e instanceof PortInUseError)) throw e;
  console.error(`examples/arithmetic: ${e.message}`);
  process.exit(1);
}

// The runner side of a client-server run re-executes this script; only the algorithm side reports.
if (baseline.finished.length > 0) {
  let total = 0;
  for (const r of baseline.finished) {
    const spans = (await trainer.store.querySpans(r.rollout_id, { attempt_id: "latest" })).items;
    const reward = spans.map((s) => s.attributes["agentlightning.reward.0.value"]).find((v) => typeof v === "number");
    total += typeof reward === "number" ? reward : 0;
  }
  const ok = baseline.finished.filter((r) => r.status === "succeeded").length;
  console.log(
    `strategy=${kind} rollouts=${baseline.finished.length} succeeded=${ok} mean_reward=${(total / baseline.finished.length).toFixed(3)}`,
  );
}
