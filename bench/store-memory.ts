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
import { InMemoryLightningStore } from "../src/store/memory.ts";
import type { Span } from "../src/types/index.ts";
import { makeLlmSpan as makeSpan } from "./_llm-span.ts";

const UPSTREAM_PYTHON: Record<string, number> = {
  enqueue: 14_500,
  dequeue: 9_600,
  addSpan: 6_900,
  lifecycle: 865,
};
const TARGET_LIFECYCLES = 20_000;

interface Rate {
  /** Operations per second of CPU time (user + system of this process): stable on a shared machine. */
  perCpuSecond: number;
  /** Operations per second of wall time. */
  perWallSecond: number;
}

async function timeIt(n: number, fn: (i: number) => Promise<unknown>): Promise<Rate> {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  for (let i = 0; i < n; i++) await fn(i);
  const wall = (performance.now() - t0) / 1000;
  const c = process.cpuUsage(c0);
  return { perCpuSecond: n / ((c.user + c.system) / 1e6), perWallSecond: n / wall };
}

/** Best of a few rounds (each on a fresh store from `setup`): other processes only ever slow a round down. */
async function best<S>(rounds: number, setup: () => Promise<S>, n: number, fn: (s: S, i: number) => Promise<unknown>): Promise<Rate> {
  let top: Rate = { perCpuSecond: 0, perWallSecond: 0 };
  for (let r = 0; r < rounds; r++) {
    const state = await setup();
    const rate = await timeIt(n, (i) => fn(state, i));
    if (rate.perCpuSecond > top.perCpuSecond) top = rate;
  }
  return top;
}

const fmt = (x: number): string => Math.round(x).toLocaleString("en-US");

function report(name: string, rate: Rate, unit = "ops/s"): void {
  const base = UPSTREAM_PYTHON[name];
  const ratio = base ? `  = ${(rate.perCpuSecond / base).toFixed(1)}x upstream Python (${fmt(base)})` : "";
  console.log(`${name.padEnd(10)} ${fmt(rate.perCpuSecond).padStart(9)} ${unit} per CPU-second (wall: ${fmt(rate.perWallSecond)})${ratio}`);
}

/**
 * The same lifecycle against a toy store (a Map, an array queue, plain copies, no validation, no
 * freezing, no locking): how fast this machine runs that much async JS at all, measured in this run.
 */
async function machineFloor(n: number): Promise<Rate> {
  const copy = (v: unknown): unknown => {
    if (typeof v !== "object" || v === null) return v;
    if (Array.isArray(v)) return v.map(copy);
    const o: Record<string, unknown> = {};
    for (const k in v) o[k] = copy((v as Record<string, unknown>)[k]);
    return o;
  };
  return best(
    3,
    async () => ({ rows: new Map<string, Record<string, unknown>>(), queue: [] as string[], spans: [] as unknown[] }),
    n,
    async (toy, i) => {
      const enqueue = async () => {
        const id = `ro-${i}`;
        toy.rows.set(id, { rollout_id: id, input: { i }, status: "queuing" });
        toy.queue.push(id);
      };
      const dequeue = async () => {
        const id = toy.queue.shift()!;
        const r = { ...toy.rows.get(id)!, status: "preparing" };
        toy.rows.set(id, r);
        return { ...r, rollout_id: id, attempt: { rollout_id: id, attempt_id: "at-1", status: "preparing" } };
      };
      const addSpan = async (s: Span) => {
        toy.spans.push(copy(s));
        toy.rows.set(s.rollout_id, { ...toy.rows.get(s.rollout_id)!, status: "running" });
      };
      const finish = async (id: string) => toy.rows.set(id, { ...toy.rows.get(id)!, status: "succeeded" });
      await enqueue();
      const ar = await dequeue();
      for (let k = 1; k <= 4; k++) await addSpan(makeSpan(ar.rollout_id, ar.attempt.attempt_id, k));
      await finish(ar.rollout_id);
    },
  );
}

async function main(): Promise<void> {
  const N = Number(process.env.BENCH_N ?? 20_000);
  const ROUNDS = 3;
  console.log(`InMemoryLightningStore, ${fmt(N)} operations per round, best of ${ROUNDS} rounds; rates per CPU-second of this process`);

  const queued = async () => {
    const store = new InMemoryLightningStore();
    await store.enqueueManyRollouts(Array.from({ length: N }, (_, i) => ({ input: { question: "What is 2 + 2?", i } })));
    return store;
  };
  report(
    "enqueue",
    await best(
      ROUNDS,
      async () => new InMemoryLightningStore(),
      N,
      (st, i) => st.enqueueRollout({ question: "What is 2 + 2?", i }),
    ),
  );
  report("dequeue", await best(ROUNDS, queued, N, (st) => st.dequeueRollout({ worker_id: "w" })));

  const running = async () => {
    const store = new InMemoryLightningStore();
    const ar = await store.startRollout({ q: 1 });
    return { store, ar };
  };
  report(
    "addSpan",
    await best(ROUNDS, running, N, ({ store, ar }, i) => store.addSpan(makeSpan(ar.rollout_id, ar.attempt.attempt_id, i + 1))),
  );

  const lifecycle = async (store: InMemoryLightningStore, i: number) => {
    await store.enqueueRollout({ question: "What is 2 + 2?", i });
    const ar = (await store.dequeueRollout({ worker_id: "w" }))!;
    for (let k = 1; k <= 4; k++) await store.addSpan(makeSpan(ar.rollout_id, ar.attempt.attempt_id, k));
    await store.updateAttempt(ar.rollout_id, ar.attempt.attempt_id, { status: "succeeded" });
  };
  const L = Math.max(1000, Math.floor(N / 2));
  const life = await best(ROUNDS, async () => new InMemoryLightningStore(), L, lifecycle);
  report("lifecycle", life, "lifecycles/s");
  const floor = await machineFloor(L);
  console.log(
    `toy floor  ${fmt(floor.perCpuSecond).padStart(9)} lifecycles/s per CPU-second: the same calls on a bare Map store; the real store runs at ${((life.perCpuSecond / floor.perCpuSecond) * 100).toFixed(0)}% of it`,
  );
  console.log(
    `target     ${fmt(TARGET_LIFECYCLES).padStart(9)} lifecycles/s: ${life.perCpuSecond >= TARGET_LIFECYCLES ? "met" : "NOT met"} on this machine now`,
  );

  // querySpans over 100k spans of one rollout
  {
    const store = new InMemoryLightningStore();
    const ar = await store.startRollout({ q: 1 });
    const batch: Span[] = [];
    // Spans mostly arrive in sequence order; every 100th pair is swapped so the sort has real work.
    for (let i = 0; i < 100_000; i++)
      batch.push(makeSpan(ar.rollout_id, ar.attempt.attempt_id, i % 100 === 0 ? i + 2 : i % 100 === 1 ? i : i + 1));
    for (let i = 0; i < batch.length; i += 10_000) await store.addManySpans(batch.slice(i, i + 10_000));
    const all = await timeIt(10, () => store.querySpans(ar.rollout_id));
    const page = await timeIt(10, () => store.querySpans(ar.rollout_id, { name_contains: "chat", limit: 100, offset: 500 }));
    const latest = await timeIt(10, () =>
      store.querySpans(ar.rollout_id, { attempt_id: "latest", sort_by: "start_time", sort_order: "desc", limit: 10 }),
    );
    console.log(`querySpans ${all.perCpuSecond.toFixed(1).padStart(9)} queries/s: all 100k spans, sorted by sequence_id`);
    console.log(`querySpans ${page.perCpuSecond.toFixed(1).padStart(9)} queries/s: name_contains filter + a page of 100`);
    console.log(`querySpans ${latest.perCpuSecond.toFixed(1).padStart(9)} queries/s: latest attempt, top 10 by start_time desc`);
    await store.close();
  }
}

await main();
