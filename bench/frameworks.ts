/**
 * What training adds to each model call of an agent written in each framework (examples/frameworks/),
 * against the plain `openai` agent (examples/calc-x/agent.ts), all in the same run: the Calc-X agent
 * solves a task in two model calls (a calculator call, then the answer) against a scripted instant
 * upstream, either directly (no rollout, nothing recorded) or as in training: inside a rollout traced by
 * `OtelTracer` (the framework's own spans recorded where it makes them: the AI SDK's), its model calls
 * through the LLM proxy under the rollout's prefix, which stores a span with token ids per call. The ways
 * alternate rollout by rollout in one process (runners and the proxy share the trainer's process in
 * `agl train`), the calculator an in-process MCP server; a third way, traced with the calls direct, splits
 * the tracing from the proxy. Per model call: the median rollout time over 2.
 * Each unstreamed row also says what training adds beyond what it adds to the plain client, the
 * framework's own share (the plain agent does not stream; bench/proxy.ts has the proxy's streamed path).
 * Goal: added per call under 1 ms or 5 % of the direct call, whichever is larger.
 *
 * Run: `npx tsx bench/frameworks.ts [--rollouts 300]` (or `npm run bench -- frameworks`).
 */
import { availableParallelism, loadavg } from "node:os";
import { runCalcX } from "../examples/calc-x/agent.ts";
import { createCalculatorServer } from "../examples/calc-x/calculator.ts";
import { InProcessToolServer } from "../examples/calc-x/mcp.ts";
import type { CalcXTask } from "../examples/calc-x/types.ts";
import { runAiSdk } from "../examples/frameworks/ai-sdk.ts";
import { runLangGraph } from "../examples/frameworks/langgraph.ts";
import { runOpenAIAgents } from "../examples/frameworks/openai-agents.ts";
import { LLMProxy } from "../src/proxy/llm-proxy.ts";
import { InMemoryLightningStore } from "../src/store/memory.ts";
import { runnerFetch } from "../src/trainer/runner-fetch.ts";
import { OtelTracer } from "../src/tracer/index.ts";
import type { LLM } from "../src/types/index.ts";
import { answer, calc, step } from "../test/frameworks/frameworks.ts";
import { startScriptedUpstream } from "../test/proxy/scripted-upstream.ts";

const GOAL_MS = 1;
const GOAL_SHARE = 0.05;
const CALLS_PER_ROLLOUT = 2;
const TASK: CalcXTask = {
  id: "bench",
  question: "Tom has 37 bags of 219 coins. Total?",
  answer: "8103",
  calls: 1,
  expressions: ["37*219"],
};
const args = process.argv.slice(2);
const rollouts = args[0] === "--rollouts" ? Number(args[1]) : 300;

type Run = (llm: LLM, stream: boolean) => Promise<number>;
const tools = new InProcessToolServer("calculator", createCalculatorServer);
const AGENTS: { name: string; streams: boolean; run: Run }[] = [
  { name: "`openai` client (examples/calc-x/agent.ts)", streams: false, run: async (llm) => (await runCalcX(TASK, llm, { tools })).reward },
  { name: "Vercel AI SDK", streams: true, run: async (llm, stream) => (await runAiSdk(TASK, llm, { tools, stream })).reward },
  { name: "LangGraph.js", streams: true, run: async (llm, stream) => (await runLangGraph(TASK, llm, { tools, stream })).reward },
  { name: "OpenAI Agents SDK", streams: true, run: async (llm, stream) => (await runOpenAIAgents(TASK, llm, { tools, stream })).reward },
];

// The upstream answers a request that ends with a tool result with the answer, any other with a
// calculator call; its JSON answers carry vLLM-style token ids, which the proxy records.
const upstream = await startScriptedUpstream();
const tokenIds = { prompt_token_ids: Array.from({ length: 100 }, (_, i) => 10 + i) };
upstream.onRequest = (got) => {
  upstream.received.length = 0;
  const messages = got.body.messages as { role: string }[];
  const reply = messages.at(-1)?.role === "tool" ? answer("### ANSWER: 8103 ###") : calc("37*219");
  const withIds = { ...reply, ...tokenIds, choices: reply.choices.map((c) => ({ ...c, token_ids: [1, 2, 3, 4, 5, 6, 7, 8] })) };
  upstream.script.push(step(withIds as typeof reply, got.body.stream === true));
};
const store = new InMemoryLightningStore();
// as `agl proxy` runs it: whole answers over undici's pools
const proxy = new LLMProxy({
  models: [{ name: "bench", upstreams: [upstream.url], params: { return_token_ids: true } }],
  store,
  fetchWhole: runnerFetch(),
});
await proxy.start();
const tracer = new OtelTracer();
tracer.initWorker(0, store);
const direct: LLM = { resource_type: "llm", endpoint: upstream.url, model: "bench", api_key: null, sampling_parameters: {} };

async function timed(run: () => Promise<number>): Promise<number> {
  const t0 = performance.now();
  if ((await run()) !== 1) throw new Error("the agent did not solve the scripted task");
  return performance.now() - t0;
}

/** One traced rollout: its spans delivered to the store, its model calls through the proxy or not. */
async function traced(run: Run, stream: boolean, throughProxy: boolean): Promise<number> {
  const r = await store.startRollout(null);
  const ids = { rolloutId: r.rollout_id, attemptId: r.attempt.attempt_id };
  const llm = throughProxy ? (proxy.asResource({ ...ids, model: "bench" }) as LLM) : direct;
  return timed(() => tracer.traceContext(ids, () => run(llm, stream)));
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
const rows: string[] = [];
/** Rows over the goal: by tracing alone, by tracing and the proxy, and by that beyond the plain client's. */
const missed = { tracing: 0, added: 0, beyondPlain: 0 };
let plainAdded = 0;
try {
  for (const stream of [false, true]) {
    for (const agent of AGENTS.filter((a) => a.streams || !stream)) {
      const untraced: number[] = [];
      const tracedOnly: number[] = [];
      const training: number[] = [];
      for (let i = 0; i < 20; i++) await Promise.all([timed(() => agent.run(direct, stream)), traced(agent.run, stream, true)]); // warm-up
      for (let i = 0; i < rollouts; i++) {
        untraced.push(await timed(() => agent.run(direct, stream)));
        tracedOnly.push(await traced(agent.run, stream, false));
        training.push(await traced(agent.run, stream, true));
      }
      const perCall = (xs: number[]) => median(xs) / CALLS_PER_ROLLOUT;
      const base = perCall(untraced);
      const tracing = perCall(tracedOnly) - base;
      const added = perCall(training) - base;
      const goal = Math.max(GOAL_MS, GOAL_SHARE * base);
      if (agent === AGENTS[0]) plainAdded = added;
      if (tracing > goal) missed.tracing++;
      if (added > goal) missed.added++;
      if (!stream && added - plainAdded > goal) missed.beyondPlain++;
      rows.push(
        `| ${agent.name} | ${stream ? "streamed" : "not streamed"} | ${base.toFixed(2)} | ${perCall(training).toFixed(2)} | ` +
          `${tracing.toFixed(2)} | ${added.toFixed(2)} (${((100 * added) / base).toFixed(0)} %) | ${stream ? "" : (added - plainAdded).toFixed(2)} | ${goal.toFixed(2)} |`,
      );
    }
  }
} finally {
  await proxy.stop();
  await upstream.stop();
}
console.log(
  `Calc-X rollouts of ${CALLS_PER_ROLLOUT} model calls, ${rollouts} each way per row (ms per model call, medians); load average ${loadavg()[0]!.toFixed(1)} on ${availableParallelism()} cores\n`,
);
console.log(
  "| agent | model calls | direct | in training | added by tracing | added by tracing and the proxy | beyond the `openai` client's | goal |",
);
console.log("|---|---|---:|---:|---:|---:|---:|---:|");
for (const r of rows) console.log(r);
const verdict = (n: number) => (n === 0 ? "every row meets it" : `${n} of ${rows.length} rows MISS it`);
console.log(`\ngoal: added < max(${GOAL_MS} ms, ${100 * GOAL_SHARE} % of the direct call)`);
console.log(`added by tracing: ${verdict(missed.tracing)}`);
console.log(`added by tracing and the proxy: ${verdict(missed.added)}`);
console.log(`added beyond the plain client's (unstreamed): ${verdict(missed.beyondPlain)}`);
