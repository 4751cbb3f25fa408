/**
 * Run under Node (tsx), Deno and Bun by cross-runtime.test.ts: a runner's agent makes traced
 * `openai` calls (ESM import of the real client, no loader hook) to the scripted upstream (plain,
 * streamed, a tool call), and the adapters turn the stored spans into triplets and chat records. Prints
 * one JSON report line.
 */
import OpenAI from "openai";
import { TraceToMessages, TracerTraceToTriplet } from "../../src/adapter/index.ts";
import { LitAgent, LitAgentRunner } from "../../src/runner/index.ts";
import { InMemoryLightningStore } from "../../src/store/index.ts";
import { emitReward, traceOpenAI } from "../../src/tracer/index.ts";
import { serveScriptedUpstream } from "./openai-upstream.ts";

const g = globalThis as { Deno?: unknown; Bun?: unknown };
const runtime = g.Deno ? "deno" : g.Bun ? "bun" : "node";
const upstream = await serveScriptedUpstream();

class Agent extends LitAgent<{ id: number }> {
  override async rollout(task: { id: number }) {
    const client = traceOpenAI(new OpenAI({ baseURL: upstream.baseURL, apiKey: "unused", maxRetries: 0 }), { returnTokenIds: true });
    const messages = [{ role: "user" as const, content: `task ${task.id}` }];
    await client.chat.completions.create({ model: "script-text", messages });
    let streamed = "";
    for await (const chunk of await client.chat.completions.create({ model: "script-text", messages, stream: true })) {
      streamed += chunk.choices[0]?.delta.content ?? "";
    }
    await client.chat.completions.create({ model: "script-tools", messages });
    emitReward(streamed.length / 100 + task.id);
  }
}

const store = new InMemoryLightningStore();
await store.addResources({ p: { resource_type: "prompt_template", template: "x", engine: "f-string" } });
const rollouts = await Promise.all([1, 2].map((id) => store.enqueueRollout({ id })));
// Two runners in one process: each rollout's calls must land in its own attempt.
await Promise.all(
  [0, 1].map(async (w) => {
    const runner = new LitAgentRunner<{ id: number }>({ maxRollouts: 1, pollInterval: 0.01, heartbeatInterval: 0 });
    await runner.withRunContext({ agent: new Agent(), store, workerId: w }, (r) => r.iter());
  }),
);
const report = {
  runtime,
  rollouts: [] as {
    status: string;
    names: string[];
    triplets: { prompt: number[]; response: number[]; reward: number | null }[];
    messages: unknown[];
  }[],
};
for (const r of rollouts) {
  const spans = (await store.querySpans(r.rollout_id)).items;
  report.rollouts.push({
    status: (await store.getRolloutById(r.rollout_id))!.status,
    names: spans.map((s) => s.name),
    triplets: new TracerTraceToTriplet()
      .adapt(spans)
      .map((t) => ({ prompt: t.prompt.token_ids, response: t.response.token_ids, reward: t.reward })),
    messages: new TraceToMessages().adapt(spans).map((m) => m.messages),
  });
}
await upstream.stop();
console.log(JSON.stringify(report));
