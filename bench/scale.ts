/**
 * Does the libSQL store slow down as it fills? The same measurements on a file database that already
 * holds 0, 1M, 10M... spans (SCALE_SIZES, default "0,1000000"), through the store in this process and
 * through a store server (runtimes/node.ts in its own process) on the same file:
 * - spans/s through addManySpans (batches of 1,000 spans of new rollouts, 13 spans each: the training shape);
 * - rollout lifecycles/s with 32 concurrent workers (enqueue, dequeue, 4 spans, updateAttempt succeeded);
 * - querySpans pages/s (limit 100): the spans of rollouts just written (what a trainer reads), and of
 *   random stored rollouts (a dashboard browsing history): lookups spread over the whole file, which at
 *   10M spans is far bigger than SQLite's page cache, so each page costs reads from the OS.
 * Each figure is printed with its ratio to the same figure at the first size (the baseline, measured in
 * the same run); the goal is a ratio of at least 0.8 at 10M (at most 20 % slower). In each round the sizes
 * take turns; each gets a fresh store (and server process) with a warm-up run at a tenth of the counts.
 *
 * The prefill goes through the store's batch paths (enqueueManyRollouts, dequeueManyRollouts, then
 * addManySpans of 5,000 spans): 13 spans per rollout, so 10M spans are 770k rollouts, left unfinished
 * (the watchdog then has 770k rollouts it must not scan). Files live in SCALE_DIR (default the OS temp
 * directory) as agl-scale-<spans>.db; with SCALE_KEEP=1 they are kept and a later run reuses a file
 * that holds the right count (10M spans take ~8 GB and minutes to write). BENCH_ROUNDS (default 3)
 * rounds per figure, best one printed with the range; each also as a CPU-time rate (items per CPU second
 * of the process doing the store's work), since on a shared machine the wall clock mostly measures the
 * other tenants. SCALE_SERVER=0 skips the server half.
 *
 * Run: `SCALE_SIZES=0,1000000,10000000 npx tsx bench/scale.ts` (or `npm run bench -- scale`).
 */
import { existsSync, readFileSync, rmSync, statSync } from "node:fs";
import { availableParallelism, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { LightningStoreClient } from "../src/client/index.ts";
import { LibsqlLightningStore, type LightningStore } from "../src/store/index.ts";
import type { AttemptedRollout } from "../src/types/index.ts";
import { startServerProcess } from "../test/server/processes.ts";
import { makeLlmSpan } from "./_llm-span.ts";

const SIZES = (process.env.SCALE_SIZES ?? "0,1000000").split(",").map((s) => Number(s.trim()));
const DIR = process.env.SCALE_DIR ?? tmpdir();
const KEEP = process.env.SCALE_KEEP === "1";
const SERVER = process.env.SCALE_SERVER !== "0";
const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 3));
const PER_ROLLOUT = 13;
const GOAL = 0.8;

interface Rate {
  wall: number;
  cpu: number;
}

/** CPU seconds (user + system) a process has used so far, from /proc/<pid>/stat (Linux). */
function processCpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** Times `fn` over `n` items, by wall clock and by the CPU time of the process doing the work (`pid`, or this one). */
async function rate(n: number, fn: () => Promise<void>, pid?: number): Promise<Rate> {
  const cpu0 = pid === undefined ? process.cpuUsage() : null;
  const srv0 = pid === undefined ? 0 : processCpuSeconds(pid);
  const t0 = performance.now();
  await fn();
  const wall = (performance.now() - t0) / 1000;
  let cpuS: number;
  if (cpu0 !== null) {
    const c = process.cpuUsage(cpu0);
    cpuS = (c.user + c.system) / 1e6;
  } else cpuS = processCpuSeconds(pid!) - srv0;
  return { wall: n / wall, cpu: n / Math.max(cpuS, 1e-3) };
}

/** `rollouts` new rollouts, claimed: the attempts spans go to. */
async function claimRollouts(store: LightningStore, rollouts: number): Promise<AttemptedRollout[]> {
  const claimed: AttemptedRollout[] = [];
  for (let done = 0; done < rollouts; ) {
    const n = Math.min(10_000, rollouts - done);
    await store.enqueueManyRollouts(Array.from({ length: n }, (_, i) => ({ input: { i: done + i } })));
    for (let got = 0; got < n; ) {
      const batch = await store.dequeueManyRollouts({ limit: n - got, worker_id: "w" });
      got += batch.length;
      claimed.push(...batch);
    }
    done += n;
  }
  return claimed;
}

/** `n` spans for new rollouts, PER_ROLLOUT each, in the order they are written. */
async function spansForNewRollouts(store: LightningStore, n: number) {
  const claimed = await claimRollouts(store, Math.ceil(n / PER_ROLLOUT));
  return Array.from({ length: n }, (_, i) => {
    const ar = claimed[Math.floor(i / PER_ROLLOUT)]!;
    return makeLlmSpan(ar.rollout_id, ar.attempt.attempt_id, (i % PER_ROLLOUT) + 1);
  });
}

async function prefill(path: string, spans: number): Promise<void> {
  const store = await LibsqlLightningStore.open(`file:${path}`);
  const t0 = performance.now();
  const chunk = 13 * 10_000;
  for (let done = 0; done < spans; done += chunk) {
    const batch = await spansForNewRollouts(store, Math.min(chunk, spans - done));
    for (let i = 0; i < batch.length; i += 5000) await store.addManySpans(batch.slice(i, i + 5000));
    if ((done / chunk) % 10 === 9)
      console.log(`  prefill ${(done + batch.length).toLocaleString("en-US")} spans, ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  }
  await store.close();
  const s = (performance.now() - t0) / 1000;
  console.log(
    `  prefilled ${spans.toLocaleString("en-US")} spans in ${s.toFixed(0)} s (${Math.round(spans / s).toLocaleString("en-US")} spans/s)`,
  );
}

/** A file holding `spans` spans: reused if kept from an earlier run with that count, else written. */
async function databaseWith(spans: number): Promise<string> {
  const path = join(DIR, `agl-scale-${spans}.db`);
  // An empty file is always made afresh (a kept one holds what earlier rounds wrote).
  if (spans > 0 && existsSync(path) && KEEP) {
    const store = await LibsqlLightningStore.open(`file:${path}`);
    const held = (await store.statistics()).total_spans;
    await store.close();
    if (held !== undefined && held >= spans && held < spans + 1_000_000) return path;
  }
  for (const suffix of ["", "-wal", "-shm"]) rmSync(path + suffix, { force: true });
  if (spans > 0) await prefill(path, spans);
  return path;
}

/** Rollout ids spread over the whole file (random rowids), for pages that touch the whole spans index. */
async function sampleRollouts(path: string, n: number): Promise<string[]> {
  const { default: Database } = (await import("libsql")) as unknown as {
    default: new (p: string) => { prepare(sql: string): { raw(on: boolean): { all(...a: unknown[]): unknown[][] } }; close(): void };
  };
  const db = new Database(path);
  const max = Number(db.prepare(`SELECT MAX(rowid) FROM "rollouts"`).raw(true).all()[0]![0] ?? 0);
  const pick = db.prepare(`SELECT "rollout_id" FROM "rollouts" WHERE rowid >= ? ORDER BY rowid LIMIT 1`).raw(true);
  const out: string[] = [];
  for (let i = 0; i < n && max > 0; i++) out.push(String(pick.all(1 + Math.floor(Math.random() * max))[0]![0]));
  db.close();
  return out;
}

/** The three measurements against `store` (this process's store, or a client of a server whose CPU is `pid`'s). */
async function measure(store: LightningStore, path: string, pid?: number, scale = 1): Promise<Record<string, Rate>> {
  const spanCount = Math.round(20_000 * scale);
  const spans = await spansForNewRollouts(store, spanCount);
  const addMany = await rate(
    spanCount,
    async () => {
      await Promise.all(
        [0, 1, 2, 3].map(async (w) => {
          for (let i = w * 1000; i < spanCount; i += 4000) await store.addManySpans(spans.slice(i, i + 1000));
        }),
      );
    },
    pid,
  );

  const lifecycleCount = Math.round(1500 * scale);
  let next = 0;
  const lifecycles = await rate(
    lifecycleCount,
    async () => {
      await Promise.all(
        Array.from({ length: 32 }, async (_, w) => {
          while (next < lifecycleCount) {
            const i = next++;
            await store.enqueueRollout({ question: "What is 2 + 2?", i });
            const ar = await store.dequeueRollout({ worker_id: `w${w}` });
            if (!ar) continue;
            for (let k = 1; k <= 4; k++) await store.addSpan(makeLlmSpan(ar.rollout_id, ar.attempt.attempt_id, k));
            await store.updateAttempt(ar.rollout_id, ar.attempt.attempt_id, { status: "succeeded" });
          }
        }),
      );
    },
    pid,
  );

  const pageCount = Math.round(2000 * scale);
  // The spans of rollouts just written (what a trainer reads), and of rollouts anywhere in the file.
  const recent = [...new Set(spans.map((s) => s.rollout_id))];
  const recentPages = await pagesOf(
    store,
    Array.from({ length: pageCount }, (_, i) => recent[i % recent.length]!),
    pid,
  );
  const randomPages = await pagesOf(store, await sampleRollouts(path, pageCount), pid);
  return {
    "addManySpans (spans/s)": addMany,
    "lifecycles/s, 32 workers": lifecycles,
    "querySpans pages/s, recent rollouts": recentPages,
    "querySpans pages/s, random rollouts": randomPages,
  };
}

/** querySpans (limit 100) of each of `ids`, 8 in flight. */
async function pagesOf(store: LightningStore, ids: readonly string[], pid?: number): Promise<Rate> {
  let p = 0;
  return rate(
    ids.length,
    async () => {
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          while (p < ids.length) {
            const page = await store.querySpans(ids[p++]!, { limit: 100 });
            if (page.items.length === 0) throw new Error("a stored rollout came back without spans");
          }
        }),
      );
    },
    pid,
  );
}

/** One round on the file through the store in this process: a warm-up run at a tenth of the counts (not recorded), then the real one. */
async function storeRound(path: string): Promise<Record<string, Rate>> {
  const store = await LibsqlLightningStore.open(`file:${path}`);
  try {
    await measure(store, path, undefined, 0.1);
    return await measure(store, path);
  } finally {
    await store.close();
  }
}

/** The same through a store server on the file, in its own process, driven by a client from this one. */
async function serverRound(path: string): Promise<Record<string, Rate>> {
  const server = await startServerProcess("node", ["--port", "0", "--db", `file:${path}`, "--log-level", "warning"]);
  const client = new LightningStoreClient(server.url);
  try {
    await measure(client, path, server.proc.pid!, 0.1);
    const out = await measure(client, path, server.proc.pid!);
    return Object.fromEntries(Object.entries(out).map(([k, v]) => [`server ${k}`, v]));
  } finally {
    await client.close();
    await server.stop("SIGTERM");
  }
}

/** Best of the rounds (by wall clock) with the range. */
function best(rs: readonly Rate[]): Rate & { lo: number } {
  const b = rs.reduce((a, x) => (x.wall > a.wall ? x : a));
  return { ...b, lo: Math.min(...rs.map((r) => r.wall)) };
}

async function main(): Promise<void> {
  const fmt = (v: number) => Math.round(v).toLocaleString("en-US");
  const results = new Map<number, Map<string, Rate & { lo: number }>>();
  const fileSizes = new Map<number, number>();
  const load0 = loadavg()[0]!;
  const paths = new Map<number, string>();
  for (const size of SIZES) {
    console.log(`${size.toLocaleString("en-US")} spans stored:`);
    paths.set(size, await databaseWith(size));
  }
  // The sizes take turns within each round, so a machine whose speed drifts over minutes does not
  // favour the size measured last.
  const measured = new Map<number, Map<string, Rate[]>>(SIZES.map((s) => [s, new Map()]));
  for (let r = 0; r < ROUNDS; r++) {
    for (const size of SIZES) {
      const path = paths.get(size)!;
      const figures = { ...(await storeRound(path)), ...(SERVER ? await serverRound(path) : {}) };
      const into = measured.get(size)!;
      for (const [k, v] of Object.entries(figures)) into.set(k, [...(into.get(k) ?? []), v]);
      console.log(
        `round ${r + 1}, ${size.toLocaleString("en-US")} spans: ${Object.entries(figures)
          .map(([k, v]) => `${k} ${fmt(v.wall)}`)
          .join(", ")}`,
      );
    }
  }
  for (const size of SIZES) {
    const row = new Map([...measured.get(size)!].map(([k, v]) => [k, best(v)]));
    results.set(size, row);
    fileSizes.set(size, statSync(paths.get(size)!).size);
    console.log(`\n${size.toLocaleString("en-US")} spans stored:`);
    for (const [k, v] of row)
      console.log(`  ${k.padEnd(34)} ${fmt(v.wall).padStart(8)} (rounds ${fmt(v.lo)}-${fmt(v.wall)}; cpu-time rate ${fmt(v.cpu)})`);
  }
  if (!KEEP) for (const path of paths.values()) for (const suffix of ["", "-wal", "-shm"]) rmSync(path + suffix, { force: true });
  const base = results.get(SIZES[0]!)!;
  const names = [...base.keys()];
  console.log("\nEach cell: wall-clock rate / CPU-time rate, with the ratio to the first column in brackets.");
  console.log(`\n| measurement | ${SIZES.map((s) => `${s.toLocaleString("en-US")} spans`).join(" | ")} |`);
  console.log(`|---|${SIZES.map(() => "---:").join("|")}|`);
  for (const name of names) {
    const b = base.get(name)!;
    const cells = SIZES.map((s, i) => {
      const v = results.get(s)!.get(name)!;
      if (i === 0) return `${fmt(v.wall)} / ${fmt(v.cpu)}`;
      return `${fmt(v.wall)} (${(v.wall / b.wall).toFixed(2)}) / ${fmt(v.cpu)} (${(v.cpu / b.cpu).toFixed(2)})`;
    });
    console.log(`| ${name} | ${cells.join(" | ")} |`);
  }
  console.log(`| file size (MB) | ${SIZES.map((s) => fmt(fileSizes.get(s)! / 1e6)).join(" | ")} |`);
  const last = SIZES[SIZES.length - 1]!;
  const worst = names.map((n) => [n, results.get(last)!.get(n)!.wall / base.get(n)!.wall] as const).sort((a, b) => a[1] - b[1])[0];
  if (worst && SIZES.length > 1) {
    console.log(
      `\nworst ratio at ${last.toLocaleString("en-US")} spans: ${worst[1].toFixed(2)} (${worst[0]}); goal >= ${GOAL}: ${worst[1] >= GOAL ? "met" : "NOT met"}`,
    );
  }
  console.log(
    `load average ${load0.toFixed(1)} -> ${loadavg()[0]!.toFixed(1)} on ${availableParallelism()} CPUs; rates are the best of ${ROUNDS} round(s)`,
  );
}

await main();
