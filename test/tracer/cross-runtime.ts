/**
 * Run under Node (tsx), Deno and Bun by cross-runtime.test.ts: traces concurrent rollouts with a plain
 * OTel-instrumented function and emitters through a runner, and prints one JSON report line.
 */
import { trace } from "@opentelemetry/api";
import { LitAgent } from "../../src/runner/index.ts";
import { emitReward } from "../../src/tracer/index.ts";
import { traceSixRollouts } from "./traced-runners.ts";

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

// the agent relies on the runtime's async context to find its rollout across awaits
const report = { runtime, rollouts: await traceSixRollouts([0, 1, 2].map(() => new Agent())) };
console.log(JSON.stringify(report));
