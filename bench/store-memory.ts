/**
 * InMemoryLightningStore throughput: enqueue, dequeue, addSpan, a full rollout lifecycle
 * (enqueue, dequeue, 4 spans via addSpan, updateAttempt succeeded) and querySpans over 100k spans.
 *
 * Baseline: upstream's Python InMemoryLightningStore (agent-lightning v0.3.0) measured on this machine
 * (figures from the issue; Python cannot run here, so they are printed as constants):
 * about 865 lifecycles/s, enqueue 14,500/s, dequeue 9,600/s, add_span 6,900/s.
 *
 * Run: `npx tsx bench/store-memory.ts` (or `npm run bench -- store-memory`).
 */
import { InMemoryLightningStore } from "../src/store/index.ts";
import { spanFromAttributes, type Span } from "../src/types/index.ts";

const UPSTREAM_PYTHON: Record<string, number> = {
  enqueue: 14_500,
  dequeue: 9_600,
  addSpan: 6_900,
  lifecycle: 865,
};
const TARGET_LIFECYCLES = 20_000;

/** A span shaped like a runner's LLM-call span: a handful of attributes, one event. */
function makeSpan(rolloutId: string, attemptId: string, seq: number): Span {
  const span = spanFromAttributes({
    rollout_id: rolloutId,
    attempt_id: attemptId,
    sequence_id: seq,
    name: "openai.chat.completion",
    attributes: {
      "gen_ai.system": "openai",
      "gen_ai.request.model": "qwen2.5-1.5b",
      "gen_ai.usage.prompt_tokens": 123,
      "gen_ai.usage.completion_tokens": 45,
      "gen_ai.prompt.0.content": "What is 2 + 2? Answer with a number.",
      "gen_ai.completion.0.content": "4",
    },
    start_time: 1_800_000_000 + seq,
    end_time: 1_800_000_000.5 + seq,
  });
  span.events = [{ name: "reward", attributes: { value: 1 }, timestamp: 1_800_000_000.2 + seq }];
  return span;
}

async function timeIt(n: number, fn: (i: number) => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < n; i++) await fn(i);
  return (n / (performance.now() - t0)) * 1000;
}

function report(name: string, opsPerSec: number, unit = "ops/s"): void {
  const base = UPSTREAM_PYTHON[name];
  const ratio = base ? `  ${(opsPerSec / base).toFixed(1)}x upstream Python (${base.toLocaleString("en-US")} ${unit})` : "";
  console.log(`${name.padEnd(12)} ${Math.round(opsPerSec).toLocaleString("en-US").padStart(10)} ${unit}${ratio}`);
}

async function main(): Promise<void> {
  const N = Number(process.env.BENCH_N ?? 20_000);

  // enqueue / dequeue
  {
    const store = new InMemoryLightningStore();
    await timeIt(2000, () => store.enqueueRollout({ warm: true }));
    await timeIt(2000, () => store.dequeueRollout({ worker_id: "w" }));
    report("enqueue", await timeIt(N, (i) => store.enqueueRollout({ question: "What is 2 + 2?", i })));
    report("dequeue", await timeIt(N, () => store.dequeueRollout({ worker_id: "w" })));
    await store.close();
  }

  // addSpan into one running attempt
  {
    const store = new InMemoryLightningStore();
    const ar = await store.startRollout({ q: 1 });
    const spans = Array.from({ length: N }, (_, i) => makeSpan(ar.rollout_id, ar.attempt.attempt_id, i + 1));
    report("addSpan", await timeIt(N, (i) => store.addSpan(spans[i]!)));
    await store.close();
  }

  // full lifecycle
  {
    const store = new InMemoryLightningStore();
    const lifecycle = async (i: number) => {
      await store.enqueueRollout({ question: "What is 2 + 2?", i });
      const ar = (await store.dequeueRollout({ worker_id: "w" }))!;
      for (let k = 1; k <= 4; k++) await store.addSpan(makeSpan(ar.rollout_id, ar.attempt.attempt_id, k));
      await store.updateAttempt(ar.rollout_id, ar.attempt.attempt_id, { status: "succeeded" });
    };
    await timeIt(1000, lifecycle);
    const rate = await timeIt(Math.max(1000, N / 2), lifecycle);
    report("lifecycle", rate, "lifecycles/s");
    console.log(`target       ${TARGET_LIFECYCLES.toLocaleString("en-US")} lifecycles/s: ${rate >= TARGET_LIFECYCLES ? "met" : "NOT met"}`);
    await store.close();
  }

  // querySpans over 100k spans of one rollout
  {
    const store = new InMemoryLightningStore();
    const ar = await store.startRollout({ q: 1 });
    const batch: Span[] = [];
    for (let i = 0; i < 100_000; i++) batch.push(makeSpan(ar.rollout_id, ar.attempt.attempt_id, 100_000 - i));
    for (let i = 0; i < batch.length; i += 10_000) await store.addManySpans(batch.slice(i, i + 10_000));
    const q = 20;
    const all = await timeIt(q, () => store.querySpans(ar.rollout_id));
    const filtered = await timeIt(q, () => store.querySpans(ar.rollout_id, { name_contains: "chat", limit: 100, offset: 500 }));
    console.log(`querySpans   ${all.toFixed(1).padStart(10)} queries/s returning all 100k spans sorted by sequence_id`);
    console.log(`querySpans   ${filtered.toFixed(1).padStart(10)} queries/s filtered (name_contains) + page of 100 over 100k`);
    await store.close();
  }
}

await main();
