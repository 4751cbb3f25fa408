/**
 * A large list answer (PAGE items) over loopback HTTP, against an in-memory store: the time to the whole
 * answer, and the longest the server's event loop stood still meanwhile (other requests wait that long).
 * Two shapes: a page of rollouts with a small input, and every span of a rollout, with large attributes.
 * The baseline, measured in the same run and the same way, is a route that answers the same store query
 * as one JSON string (`c.json`), which is what the list routes did before they streamed; the store query
 * alone is timed too. (bench/list-memory.ts measures the server's memory.) "Blocked" is the longest gap between 1 ms timer ticks: on a loaded machine
 * it includes time the process was not scheduled.
 *
 * Run: `npx tsx bench/list-pages.ts [--rollouts 50000] [--spans 10000] [--span-kib 10]`.
 */
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import type { AddressInfo } from "node:net";
import { createStoreApp } from "../src/server/index.ts";
import { InMemoryLightningStore } from "../src/store/memory.ts";
import { spanFromAttributes } from "../src/types/index.ts";

const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
/** Items of the page asked for (the most one answer held while the server capped pages by default). */
const PAGE = 10_000;
const ROLLOUTS = arg("rollouts", 50_000);
const SPANS = arg("spans", 10_000);
const SPAN_KIB = arg("span-kib", 10);

/** The longest gap between timer ticks while `run` goes on: how long the event loop was blocked. */
async function withStallMeter<T>(run: () => Promise<T>): Promise<{ result: T; stallMs: number }> {
  let last = performance.now();
  let stallMs = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    stallMs = Math.max(stallMs, now - last);
    last = now;
  }, 1);
  try {
    const result = await run();
    return { result, stallMs: Math.max(stallMs, performance.now() - last) };
  } finally {
    clearInterval(timer);
  }
}

async function main(): Promise<void> {
  const store = new InMemoryLightningStore();
  await store.enqueueManyRollouts(
    Array.from({ length: ROLLOUTS }, (_, i) => ({ input: { task: `question ${i}`, answer: i }, metadata: { i } })),
  );
  const r = await store.startRollout({ spans: true });
  const big = "x".repeat(SPAN_KIB * 1024);
  for (let i = 0; i < SPANS; i += 1000) {
    await store.addManySpans(
      Array.from({ length: Math.min(1000, SPANS - i) }, (_, k) =>
        spanFromAttributes({
          rollout_id: r.rollout_id,
          attempt_id: r.attempt.attempt_id,
          sequence_id: i + k + 1,
          attributes: { "gen_ai.prompt.0.content": big, n: i + k },
        }),
      ),
    );
  }
  const app = createStoreApp(store, { metrics: false });
  const queries = {
    rollouts: () => store.queryRollouts({ limit: PAGE }),
    spans: () => store.querySpans(r.rollout_id, {}),
  };
  const baseline = new Hono();
  baseline.get("/rollouts", async (c) => c.json(await queries.rollouts()));
  baseline.get("/spans", async (c) => c.json(await queries.spans()));
  const servers = await Promise.all(
    [app.fetch, baseline.fetch].map(
      (fetchFn) =>
        new Promise<ReturnType<typeof serve>>((resolve) => {
          const s = serve({ fetch: fetchFn, hostname: "127.0.0.1", port: 0 }, () => resolve(s));
        }),
    ),
  );
  const [ours, base] = servers.map((s) => `http://127.0.0.1:${(s.address() as AddressInfo).port}`);

  const cases: [string, string, string, () => Promise<unknown>][] = [
    [`rollouts, ${PAGE} of ${ROLLOUTS}`, `${ours}/v1/agl/rollouts?limit=${PAGE}`, `${base}/rollouts`, queries.rollouts],
    [`spans, ${SPANS} of ${SPAN_KIB} KiB`, `${ours}/v1/agl/spans?rollout_id=${r.rollout_id}&limit=-1`, `${base}/spans`, queries.spans],
  ];
  const get = (href: string) => withStallMeter(async () => (await fetch(href)).text());
  // The best of several rounds: on a shared machine the other rounds measure its load.
  const ROUNDS = 5;
  for (const [label, streamed, oneString, query] of cases) {
    const best = { streamed: Infinity, streamedStall: Infinity, oneString: Infinity, oneStringStall: Infinity, query: Infinity };
    let bytes = 0;
    let baseBytes = 0;
    let items = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const t0 = performance.now();
      const a = await get(streamed);
      const t1 = performance.now();
      const b = await get(oneString);
      const t2 = performance.now();
      await query();
      const t3 = performance.now();
      bytes = a.result.length;
      baseBytes = b.result.length;
      items = (JSON.parse(a.result) as { items: unknown[] }).items.length;
      best.streamed = Math.min(best.streamed, t1 - t0);
      best.streamedStall = Math.min(best.streamedStall, a.stallMs);
      best.oneString = Math.min(best.oneString, t2 - t1);
      best.oneStringStall = Math.min(best.oneStringStall, b.stallMs);
      best.query = Math.min(best.query, t3 - t2);
    }
    console.log(
      `${label}: streamed ${items} items, ${(bytes / 2 ** 20).toFixed(1)} MiB, in ${best.streamed.toFixed(0)} ms (event loop blocked at most ${best.streamedStall.toFixed(0)} ms at a time); ` +
        `one string of ${(baseBytes / 2 ** 20).toFixed(1)} MiB in ${best.oneString.toFixed(0)} ms (blocked ${best.oneStringStall.toFixed(0)} ms); the store query alone ${best.query.toFixed(0)} ms (best of ${ROUNDS})`,
    );
  }
  for (const s of servers) await new Promise<void>((resolve) => s.close(() => resolve()));
  await store.close();
}

await main();
