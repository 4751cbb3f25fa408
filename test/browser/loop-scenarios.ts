/**
 * The whole loop's parts through the browser entry, run twice by test/browser/loop.test.ts: once in Node,
 * once in a Chromium page (bundled from this file). Plain data in and out, so results cross
 * `page.evaluate` unchanged, and the two must agree where the runtimes' semantics agree.
 */
import { type Context, context, trace } from "@opentelemetry/api";
import OpenAI from "openai";
import {
  decodeModel,
  emitReward,
  getOtelTracer,
  InMemoryLightningStore,
  InProcessPolicyServer,
  LitAgent,
  ModelPolicy,
  NoActiveTracerError,
} from "../../src/browser.ts";
import { calcTabAgent } from "../../examples/tab/agents.ts";
import { runTab } from "../../examples/tab/loop.ts";
import { TRACED_TASK_IDS, type TracedRollout, traceSixRollouts } from "../tracer/traced-runners.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** OpenTelemetry-instrumented work that hands its context down explicitly, across awaits. */
async function work(label: string, depth: number, ctx: Context): Promise<void> {
  await getOtelTracer("lib").startActiveSpan(`${label}.${depth}`, {}, ctx, async (span) => {
    const inner = trace.setSpan(ctx, span);
    await sleep(1);
    if (depth > 0) {
      await work(label, depth - 1, inner);
      await Promise.resolve();
      await work(label, depth - 1, inner);
    }
    span.end();
  });
}

class TracedAgent extends LitAgent<{ id: number }> {
  /** Per task: whether the implicit context still held the rollout after an await. */
  readonly implicit = new Map<number, string>();
  override async rollout(task: { id: number }) {
    // the runner calls the agent inside its attempt's context: the synchronous start sees it
    const ctx = context.active();
    await work(`t${task.id}`, 2, ctx);
    try {
      emitReward(task.id / 10);
      this.implicit.set(task.id, "kept");
    } catch (e) {
      if (!(e instanceof NoActiveTracerError)) throw e;
      this.implicit.set(task.id, "lost");
      this.tracer.inTrace(() => emitReward(task.id / 10));
    }
  }
}

export interface TracingReport {
  rollouts: TracedRollout[];
  implicitAfterAwait: string[];
}

/** Three runners trace six concurrent rollouts: every span in its own rollout, in start order. */
export async function tracedRunners(): Promise<TracingReport> {
  const agents = [0, 1, 2].map(() => new TracedAgent());
  const rollouts = await traceSixRollouts(agents);
  const implicitAfterAwait = TRACED_TASK_IDS.map((id) => agents.map((a) => a.implicit.get(id)).find((v) => v !== undefined) ?? "not run");
  return { rollouts, implicitAfterAwait };
}

export interface InProcessReport {
  reply: string | null;
  tokenIds: number[];
  promptTokenIds: number[];
  spans: { name: string; promptIds: unknown; responseIds: unknown; version: unknown }[];
  wrongModel: string;
}

/** The policy server's app answered in-process, called by the official `openai` client through its `fetch`. */
export async function inProcessCall(checkpoint: Uint8Array): Promise<InProcessReport> {
  const { config, params } = decodeModel(checkpoint);
  const store = new InMemoryLightningStore();
  const server = new InProcessPolicyServer({ policy: new ModelPolicy({ model: "calc", config, params, seed: 3 }), store });
  await server.start();
  const attempted = await store.startRollout({ question: "Ann has 2 pens, gets 3. Total?" });
  const llm = server.asResource({ rolloutId: attempted.rollout_id, attemptId: attempted.attempt.attempt_id });
  const client = new OpenAI({ baseURL: llm.endpoint, apiKey: "none", maxRetries: 0, fetch: server.fetch, dangerouslyAllowBrowser: true });
  const res = (await client.chat.completions.create({
    model: "calc",
    messages: [{ role: "user", content: "Ann has 2 pens, gets 3. Total?" }],
    max_tokens: 5,
    temperature: 1,
    seed: 11,
  })) as OpenAI.ChatCompletion & { prompt_token_ids: number[]; choices: { token_ids: number[] }[] };
  let wrongModel = "no error";
  try {
    await client.chat.completions.create({ model: "other", messages: [{ role: "user", content: "x" }] });
  } catch (e) {
    wrongModel = e instanceof OpenAI.APIError ? `${e.status} ${(e.error as { code?: string }).code}` : String(e);
  }
  const spans = (await store.querySpans(attempted.rollout_id)).items.map((s) => ({
    name: s.name,
    promptIds: s.attributes.prompt_token_ids,
    responseIds: s.attributes.response_token_ids,
    version: s.attributes["lightning.policy.version"],
  }));
  await server.stop();
  await store.close();
  return {
    reply: res.choices[0]!.message.content,
    tokenIds: res.choices[0]!.token_ids,
    promptTokenIds: res.prompt_token_ids,
    spans,
    wrongModel,
  };
}

export interface LoopReport {
  backend: string;
  reports: Record<string, unknown>[];
  weightsSum: number;
}

/** The tab's loop (examples/tab/loop.ts) for two steps on the CPU engine: the numbers must be Node's. */
export async function cpuLoop(checkpoint: Uint8Array): Promise<LoopReport> {
  const r = await runTab({
    agent: calcTabAgent(checkpoint),
    backend: "cpu",
    steps: 2,
    batch: 2,
    n: 4,
    valTasks: 8,
    valEvery: 1,
    runners: 2,
  });
  const timing = /seconds|per_second|perf\//;
  return {
    backend: r.backend,
    // everything but the timings
    reports: r.reports.map((rep) =>
      Object.fromEntries(
        Object.entries(rep)
          .filter(([k]) => !timing.test(k))
          .map(([k, v]) =>
            k === "metrics" ? [k, Object.fromEntries(Object.entries(v as object).filter(([m]) => !timing.test(m)))] : [k, v],
          ),
      ),
    ),
    weightsSum: decodeModel(r.files["model.safetensors"]!).params.reduce((a, b) => a + b, 0),
  };
}
