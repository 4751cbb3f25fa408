/**
 * Run under Node (tsx), Deno and Bun by cross-runtime.test.ts: traces concurrent rollouts with a plain
 * OTel-instrumented function and emitters through a runner, and prints one JSON report line.
 */
import { trace } from "@opentelemetry/api";
import { InMemoryLightningStore } from "../../src/store/index.ts";
import { LitAgent, LitAgentRunner } from "../../src/runner/index.ts";
import { emitReward } from "../../src/tracer/index.ts";

const g = globalThis as { Deno?: unknown; Bun?: unknown };
const runtime = g.Deno ? "deno" : g.Bun ? "bun" : "node";
const lib = trace.getTracer("lib");

async function work(label: string, depth: number): Promise<void> {
  await lib.startActiveSpan(`${label}.${depth}`, async (span) => {
    await new Promise((r) => setTimeout(r, 1));
    if (depth > 0) {
      await work(label, depth - 1);
      await Promise.resolve();
      await work(label, depth - 1);
    }
    span.end();
  });
}

class Agent extends LitAgent<{ id: number }> {
  override async rollout(task: { id: number }) {
    await work(`t${task.id}`, 2);
    emitReward(task.id / 10);
  }
}

const store = new InMemoryLightningStore();
await store.addResources({ p: { resource_type: "prompt_template", template: "x", engine: "f-string" } });
const rollouts = await Promise.all([1, 2, 3, 4, 5, 6].map((id) => store.enqueueRollout({ id })));
// Three runners in one process share the tracing machinery; each must only see its own spans.
await Promise.all(
  [0, 1, 2].map(async (w) => {
    const runner = new LitAgentRunner<{ id: number }>({ maxRollouts: 2, pollInterval: 0.01, heartbeatInterval: 0 });
    await runner.withRunContext({ agent: new Agent(), store, workerId: w }, (r) => r.iter());
  }),
);
const report = { runtime, rollouts: [] as { names: string[]; consecutive: boolean; reward: unknown; status: string }[] };
for (const r of rollouts) {
  const spans = (await store.querySpans(r.rollout_id)).items;
  const seqs = spans.map((s) => s.sequence_id);
  report.rollouts.push({
    names: spans.map((s) => s.name),
    consecutive: seqs.every((s, i) => s === seqs[0]! + i),
    reward: spans.at(-1)?.attributes["agentlightning.reward.0.value"],
    status: (await store.getRolloutById(r.rollout_id))!.status,
  });
}
console.log(JSON.stringify(report));
