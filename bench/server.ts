/**
 * Store server throughput over loopback HTTP, per server runtime. The server is `runtimes/<runtime>.ts`
 * in its own process on a libSQL file; the load comes from a second process running the same
 * `LightningStoreClient` (under Bun by default, whose fetch costs the least CPU per request, so the
 * figures measure the server; `--client node` uses Node's fetch instead):
 * - spans/s through single `POST /v1/agl/spans` (32 requests in flight),
 * - spans/s through `POST /v1/agl/spans/batch` (batches of 200, 4 in flight),
 * - full rollout lifecycles/s with 8 concurrent clients (enqueue, dequeue, 4 spans in one batch,
 *   updateAttempt succeeded).
 * Baseline, measured in the same run: upstream's protocol, two round trips per span (`POST /spans/next`
 * for a sequence id, then `POST /spans`), 32 in flight.
 *
 * Each figure is printed twice: the wall-clock rate on this machine as it is (shared, so it varies with
 * the load, printed alongside), and the rate that the CPU time both processes really used allows on two
 * dedicated cores (units / max(client CPU s, server CPU s): each process needs a core of its own; with
 * `--workers`, units / max(any one process's CPU s, all processes' CPU s / 2)). The server's CPU time
 * (its primary and worker processes together) is read from /proc (Linux).
 *
 * `--workers 1,2` serves with `agl store --workers N` for each N in turn (repeat them, `1,2,1,2`, to
 * interleave runs on a shared machine), and prints each N's wall-clock rates against the first N's. It
 * also measures reads: `GET /v1/agl/rollouts/{id}` of the written rollouts, 32 in flight (`--only reads`).
 *
 * Run: `npx tsx bench/server.ts [node|deno|bun ...] [--seconds 3] [--client bun|node] [--db file|memory]
 * [--only single,batch,...] [--workers 1,2]` (or `npm run bench -- server`). `--db memory` serves an InMemoryLightningStore
 * instead of the libSQL file, which leaves the server's own cost per request (HTTP, JSON, routing);
 * `--only` runs just the named measurements (upstream, single, batch, lifecycles, reads).
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { availableParallelism, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { LightningStoreClient } from "../src/client/index.ts";
import { launchCommand, ROOT, RUNTIMES, type Runtime } from "../test/runtimes.ts";
import { startServerProcess } from "../test/server/processes.ts";
import { makeLlmSpan as makeSpan } from "./_llm-span.ts";

const TARGET_BATCH = 20_000;
const TARGET_SINGLE = 3_000;

/** The fields of /proc/<pid>/stat after the command name (state, ppid, ..., utime, stime at 11, 12). */
const statFields = (pid: number): string[] => readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");

/** CPU seconds (user + system) a process has used so far, from /proc/<pid>/stat. */
function processCpuSeconds(pid: number): number {
  const fields = statFields(pid);
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime + stime, in USER_HZ (100/s)
}

/** CPU seconds so far of the server: its process and its children (the workers of `--workers N`), by pid. */
function serverCpuSeconds(pid: number): Map<number, number> {
  const out = new Map([[pid, processCpuSeconds(pid)]]);
  for (const entry of readdirSync("/proc")) {
    const child = Number(entry);
    if (!Number.isInteger(child)) continue;
    try {
      if (Number(statFields(child)[1]) === pid) out.set(child, processCpuSeconds(child));
    } catch {
      // It ended while we looked.
    }
  }
  return out;
}

interface Rate {
  /** Units per wall-clock second, here and now. */
  wall: number;
  /** Units per second that two dedicated cores allow, from the CPU time both processes used. */
  twoCores: number;
  /** CPU microseconds per unit in the client and in the server process. */
  clientUs: number;
  serverUs: number;
}

const PHASES = ["upstream", "single", "batch", "lifecycles", "reads"] as const;
type Phase = (typeof PHASES)[number];
/** What runs unless `--only` says otherwise: reads only where worker counts are compared. */
const defaultPhases = (compareWorkers: boolean): Phase[] => PHASES.filter((p) => p !== "reads" || compareWorkers);
/** The measurements that were run (all unless `--only` named some). */
type Phases = Partial<Record<Phase, Rate>>;

// ------------------------------------------------------------------------------------------------
// The load generator (`--load URL SERVER_PID SECONDS`), run in its own process.

async function generateLoad(url: string, serverPid: number, seconds: number, only: readonly Phase[]): Promise<Phases> {
  const client = new LightningStoreClient(url, process.env.BENCH_NO_KEYS ? { retryDelays: [] } : {});
  /** Runs `workers` loops of `op` for `seconds`; each op reports its units (spans, lifecycles). */
  async function rate(secs: number, workers: number, op: (worker: number) => Promise<number>): Promise<Rate> {
    const deadline = performance.now() + secs * 1000;
    let units = 0;
    const c0 = process.cpuUsage();
    const s0 = serverCpuSeconds(serverPid);
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: workers }, async (_, w) => {
        while (performance.now() < deadline) {
          // Await first: `units += await op()` would read `units` before the await and lose updates.
          const u = await op(w);
          units += u;
        }
      }),
    );
    const wall = (performance.now() - t0) / 1000;
    const c = process.cpuUsage(c0);
    const clientCpu = (c.user + c.system) / 1e6;
    const perProcess = [...serverCpuSeconds(serverPid)].map(([pid, cpu]) => cpu - (s0.get(pid) ?? 0));
    const serverCpu = perProcess.reduce((a, b) => a + b, 0);
    return {
      wall: units / wall,
      twoCores: units / Math.max(clientCpu, ...perProcess, (clientCpu + serverCpu) / 2, 1e-9),
      clientUs: (1e6 * clientCpu) / units,
      serverUs: (1e6 * serverCpu) / units,
    };
  }

  const targets = await Promise.all(Array.from({ length: 16 }, (_, i) => client.startRollout({ bench: i })));
  let seq = 1;
  const target = (w: number) => targets[w % targets.length]!;
  // Warm-up: connections, JIT, the database file.
  await rate(0.5, 8, async (w) => (await client.addSpan(makeSpan(target(w).rollout_id, target(w).attempt.attempt_id, seq++)), 1));

  const measurements: Record<Phase, () => Promise<Rate>> = {
    upstream: () =>
      rate(seconds, 32, async (w) => {
        const t = target(w);
        const id = await client.getNextSpanSequenceId(t.rollout_id, t.attempt.attempt_id);
        await client.addSpan(makeSpan(t.rollout_id, t.attempt.attempt_id, id));
        return 1;
      }),
    single: () =>
      rate(seconds, 32, async (w) => {
        const t = target(w);
        await client.addSpan(makeSpan(t.rollout_id, t.attempt.attempt_id, seq++));
        return 1;
      }),
    batch: () =>
      rate(seconds, 4, async (w) => {
        const t = target(w);
        const spans = Array.from({ length: 200 }, () => makeSpan(t.rollout_id, t.attempt.attempt_id, seq++));
        return (await client.addManySpans(spans)).length;
      }),
    lifecycles: () =>
      rate(seconds, 8, async (w) => {
        await client.enqueueRollout({ task: w });
        const r = await client.dequeueRollout({ worker_id: `worker-${w}` });
        if (!r) return 0; // another client took it; this one's is claimed on a later turn
        await client.addManySpans([1, 2, 3, 4].map((i) => makeSpan(r.rollout_id, r.attempt.attempt_id, i)));
        await client.updateAttempt(r.rollout_id, r.attempt.attempt_id, { status: "succeeded" });
        return 1;
      }),
    reads: () =>
      rate(seconds, 32, async (w) => {
        await client.getRolloutById(target(w).rollout_id);
        return 1;
      }),
  };
  const phases: Phases = {};
  for (const p of only) phases[p] = await measurements[p]();
  const stats = await client.statistics();
  if (!stats.total_spans) throw new Error("no spans were stored");
  await client.close();
  return phases;
}

// ------------------------------------------------------------------------------------------------
// The orchestrator.

function runLoad(client: "bun" | "node", url: string, serverPid: number, seconds: number, only: readonly Phase[]): Promise<Phases> {
  const args = ["--load", url, String(serverPid), String(seconds), only.join(",")];
  const proc = spawn(...launchCommand(client, join(ROOT, "bench/server.ts"), args), {
    cwd: ROOT,
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  proc.stdout.on("data", (d: Buffer) => (out += d.toString()));
  return new Promise((resolve, reject) =>
    proc.once("exit", (code) => {
      const line = out.split("\n").find((l) => l.startsWith("RESULT "));
      if (code !== 0 || !line) reject(new Error(`load generator (${client}) exited with ${code}:\n${out}`));
      else resolve(JSON.parse(line.slice("RESULT ".length)) as Phases);
    }),
  );
}

interface Row extends Phases {
  runtime: string;
  workers: number;
}

interface Options {
  client: "bun" | "node";
  seconds: number;
  db: "file" | "memory";
  only: readonly Phase[];
  /** Worker processes of the server, one run each (default [1]). */
  workers: readonly number[];
}

async function benchRuntime(runtime: Runtime, o: Options, workers: number): Promise<Row> {
  const dir = mkdtempSync(join(tmpdir(), `agl-bench-${runtime}-`));
  const db = o.db === "memory" ? "memory" : `file:${join(dir, "bench.db")}`;
  const cluster = workers > 1 ? ["--workers", String(workers)] : [];
  const server = await startServerProcess(runtime, ["--port", "0", "--db", db, "--log-level", "warning", ...cluster]);
  try {
    const phases = await runLoad(o.client, server.url, server.proc.pid!, o.seconds, o.only);
    return {
      runtime:
        server
          .output()
          .match(/\((?:node|deno|bun) [^,)]*/)?.[0]
          .slice(1) ?? runtime,
      workers,
      ...phases,
    };
  } finally {
    const code = await server.stop("SIGTERM");
    rmSync(dir, { recursive: true, force: true });
    // biome-ignore lint/correctness/noUnsafeFinally: a server that crashed must fail the bench, even when the load itself threw first
    if (code !== 0) throw new Error(`${runtime} server exited with ${code}:\n${server.output()}`);
  }
}

async function main(argv: string[]): Promise<void> {
  const valued = ["--seconds", "--client", "--db", "--only", "--workers"];
  const flag = (name: string): string | undefined => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const workers = (flag("--workers") ?? "1").split(",").map(Number);
  const only = (flag("--only")?.split(",") ?? defaultPhases(new Set(workers).size > 1)) as Phase[];
  const unknown = only.filter((p) => !PHASES.includes(p));
  if (unknown.length) throw new Error(`--only: unknown measurement(s) ${unknown.join(", ")} (known: ${PHASES.join(", ")})`);
  const o: Options = {
    seconds: Number(flag("--seconds") ?? 3),
    client: (flag("--client") ?? "bun") as "bun" | "node",
    db: flag("--db") === "memory" ? "memory" : "file",
    only,
    workers,
  };
  if (o.workers.some((n) => !Number.isInteger(n) || n < 1)) throw new Error(`--workers: whole numbers >= 1, got ${flag("--workers")}`);
  const chosen = argv.filter((a, i) => !a.startsWith("--") && !valued.includes(argv[i - 1] ?? "")) as Runtime[];
  const runtimes = chosen.length ? chosen : RUNTIMES;

  const rows: Row[] = [];
  const load0 = loadavg()[0]!;
  for (const rt of runtimes) {
    for (const workers of o.workers) {
      const how = workers > 1 ? `, ${workers} worker processes` : "";
      console.log(`benchmarking the ${rt} server (${o.seconds} s per measurement${how}, load from a ${o.client} client)...`);
      rows.push(await benchRuntime(rt, o, workers));
    }
  }
  const load1 = loadavg()[0]!;

  const fmt = (n: number): string => Math.round(n).toLocaleString("en-US");
  const reads = rows.some((r) => r.reads);
  const cell = (r: Rate | undefined, show: (r: Rate) => string): string => (r ? show(r) : "–");
  const both = (r: Rate | undefined): string => cell(r, (x) => `${fmt(x.wall)} / ${fmt(x.twoCores)}`);
  const where = o.db === "memory" ? "an in-memory store (InMemoryLightningStore)" : "a libSQL file";
  console.log(`\nStore server on ${where}, loopback HTTP, load from LightningStoreClient under ${o.client}, ${o.seconds} s per figure.`);
  console.log(
    `Each cell: wall-clock rate here (1-min load average ${load0.toFixed(1)} -> ${load1.toFixed(1)} on ${availableParallelism()} cores) / rate the CPU time used allows on 2 dedicated cores.\n`,
  );
  console.log(
    `| server | baseline: upstream protocol, next id + POST /spans (spans/s) | single POST /spans (spans/s) | POST /spans/batch (spans/s) | batch vs baseline | lifecycles/s, 8 clients |${reads ? " reads/s, 32 in flight |" : ""}`,
  );
  console.log(`|---|---:|---:|---:|---:|---:|${reads ? "---:|" : ""}`);
  const label = (r: Row): string =>
    o.workers.length > 1 || r.workers > 1 ? `${r.runtime}, ${r.workers} worker${r.workers > 1 ? "s" : ""}` : r.runtime;
  for (const r of rows) {
    const ratio =
      r.batch && r.upstream
        ? `${(r.batch.wall / r.upstream.wall).toFixed(0)}x / ${(r.batch.twoCores / r.upstream.twoCores).toFixed(0)}x`
        : "–";
    console.log(
      `| ${label(r)} | ${both(r.upstream)} | ${both(r.single)} | ${both(r.batch)} | ${ratio} | ${both(r.lifecycles)} |${reads ? ` ${both(r.reads)} |` : ""}`,
    );
  }
  console.log(
    `\nCPU microseconds per span (per lifecycle${reads ? " and per read" : ""} in the last column${reads ? "s" : ""}), client + server:\n`,
  );
  console.log(`| server | baseline | single | batch | lifecycle |${reads ? " read |" : ""}`);
  console.log(`|---|---:|---:|---:|---:|${reads ? "---:|" : ""}`);
  const us = (r: Rate | undefined): string => cell(r, (x) => `${fmt(x.clientUs)} + ${fmt(x.serverUs)}`);
  for (const r of rows)
    console.log(
      `| ${label(r)} | ${us(r.upstream)} | ${us(r.single)} | ${us(r.batch)} | ${us(r.lifecycles)} |${reads ? ` ${us(r.reads)} |` : ""}`,
    );
  if (new Set(o.workers).size > 1) printWorkerRatios(rows, o.workers[0]!);
  const misses = rows.flatMap((r) => [
    ...(r.batch && r.batch.twoCores < TARGET_BATCH ? [`${r.runtime}: batch ${fmt(r.batch.twoCores)} < ${fmt(TARGET_BATCH)} spans/s`] : []),
    ...(r.single && r.single.twoCores < TARGET_SINGLE
      ? [`${r.runtime}: single ${fmt(r.single.twoCores)} < ${fmt(TARGET_SINGLE)} spans/s`]
      : []),
  ]);
  console.log(
    misses.length
      ? `\nbelow target (2-core figures): ${misses.join("; ")}`
      : `\nevery runtime meets the targets it was measured on, on 2 cores (batch >= ${fmt(TARGET_BATCH)}, single >= ${fmt(TARGET_SINGLE)} spans/s)`,
  );
}

/** Each worker count's mean wall-clock rate over the first count's, per runtime and measurement (same run). */
function printWorkerRatios(rows: readonly Row[], base: number): void {
  console.log(`\nWall-clock rate against ${base} worker${base > 1 ? "s" : ""} (means of the runs above):\n`);
  const measured = PHASES.filter((p) => rows.some((r) => r[p]));
  console.log(`| server | ${measured.join(" | ")} |`);
  console.log(`|---|${measured.map(() => "---:").join("|")}|`);
  const mean = (rs: Row[], p: Phase): number | null => {
    const xs = rs.flatMap((r) => (r[p] ? [r[p].wall] : []));
    return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null;
  };
  for (const runtime of new Set(rows.map((r) => r.runtime))) {
    const of = (n: number) => rows.filter((r) => r.runtime === runtime && r.workers === n);
    for (const n of new Set(rows.map((r) => r.workers))) {
      if (n === base) continue;
      const cells = measured.map((p) => {
        const [a, b] = [mean(of(n), p), mean(of(base), p)];
        return a !== null && b !== null ? `${(a / b).toFixed(2)}x` : "–";
      });
      console.log(`| ${runtime}, ${n} vs ${base} | ${cells.join(" | ")} |`);
    }
  }
}

const args = process.argv.slice(2);
if (args[0] === "--load") {
  const phases = await generateLoad(args[1]!, Number(args[2]), Number(args[3]), args[4]!.split(",") as Phase[]);
  console.log(`RESULT ${JSON.stringify(phases)}`);
} else {
  await main(args);
}
