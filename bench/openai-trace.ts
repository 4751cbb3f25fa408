/**
 * What `traceOpenAI` adds to an `openai` client call inside a rollout: calls to a local scripted upstream
 * (test/tracer/openai-upstream.ts) with a plain client and a traced one, alternating call by call so that
 * both see the same machine, plain and streamed; the traced calls' spans are delivered to an in-memory
 * store as in a run. Medians per call (the loopback round trip dominates and is noisy on a shared machine).
 *
 * Run: `npx tsx bench/openai-trace.ts`
 */
import OpenAI from "openai";
import { InMemoryLightningStore } from "../src/store/index.ts";
import { OtelTracer, traceOpenAI } from "../src/tracer/index.ts";
import { serveScriptedUpstream } from "../test/tracer/openai-upstream.ts";

const CALLS = 600;
const upstream = await serveScriptedUpstream();
const make = () => new OpenAI({ baseURL: upstream.baseURL, apiKey: "unused", maxRetries: 0 });
const plain = make();
const traced = traceOpenAI(make(), { returnTokenIds: true });
// Both ask for token ids, so both get the same answers (the traced client would add the flag itself).
const body = {
  model: "script-text",
  messages: [{ role: "user" as const, content: "What is 2 + 2? Think step by step. ".repeat(20) }],
  return_token_ids: true,
};

async function timed(client: OpenAI, stream: boolean): Promise<number> {
  const t0 = performance.now();
  if (!stream) await client.chat.completions.create(body);
  else
    for await (const _ of await client.chat.completions.create({ ...body, stream: true })) {
      // read every chunk
    }
  return performance.now() - t0;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
const store = new InMemoryLightningStore();
const tracer = new OtelTracer();
tracer.initWorker(0, store);
for (const stream of [false, true]) {
  const times = { plain: [] as number[], traced: [] as number[] };
  const r = await store.startRollout(null);
  await tracer.traceContext({ rolloutId: r.rollout_id, attemptId: r.attempt.attempt_id }, async () => {
    for (let i = 0; i < CALLS; i++) {
      times.plain.push(await timed(plain, stream));
      times.traced.push(await timed(traced, stream));
    }
  });
  const stored = (await store.querySpans(r.rollout_id)).items.length;
  const [p, t] = [median(times.plain), median(times.traced)];
  console.log(
    `${stream ? "streamed" : "plain"} chat call, median of ${CALLS}: untraced ${(p * 1000).toFixed(0)} µs, traced ${(t * 1000).toFixed(0)} µs ` +
      `(${(t / p).toFixed(2)}x, ${t >= p ? "+" : ""}${((t - p) * 1000).toFixed(0)} µs a call; ${stored} spans stored)`,
  );
}
await upstream.stop();
