/**
 * Does the store server keep its pace as its file grows? `agl store` (runtimes/node.ts in its own process)
 * on a fresh libSQL file, driven for some minutes by 16 concurrent loops over keep-alive connections
 * (undici), each playing a runner and a dashboard at once. One turn of a loop:
 * enqueue one rollout; dequeue (claims one when the queue has any); a worker heartbeat; a span batch (4
 * spans) for the oldest claimed attempt; an OTLP/JSON export (1 span) for it; one read, taking turns over
 * the loops: rollouts by status (`status_in=succeeded&limit=50`), the dashboard's rollout list
 * (`sort_by=start_time&sort_order=desc&limit=50`), one rollout, a page of a finished rollout's spans,
 * `/statistics`, `/statistics/rollouts`, `/metrics`; one bad request (malformed JSON, an unknown
 * rollout, a query parameter of the wrong type, a schema violation); and finish + claim
 * (`POST /v1/agl/attempts/finish`: 1 last span, succeeded, the next claim). So the store gains about one
 * succeeded rollout with 6 spans every 8 to 9 requests, and every kind of request runs all along.
 *
 * Printed per minute: the request rate, p50 / p99 latency per kind of request, the server's RSS and CPU
 * time per request, and the database's size (file + WAL); at the end, the last minute's rate over the
 * first's (goal >= 0.80), and the same ratio of the server's CPU time per request. A 5xx answer, or any
 * answer other than the expected one, is counted and fails the run. The rate follows the machine's other
 * load (printed), the CPU time per request far less: on a shared machine, read both.
 *
 * Run: `npm run bench -- soak [--minutes 5] [--loops 16] [--db PATH]` (or `npx tsx bench/soak.ts ...`).
 * `--db PATH` soaks an existing file (kept) instead of a fresh temporary one.
 */
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { availableParallelism, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { Pool } from "undici";
import { startServerProcess } from "../test/server/processes.ts";
import type { Span } from "../src/types/index.ts";
import { makeLlmSpan } from "./_llm-span.ts";

const GOAL = 0.8;

interface Options {
  minutes: number;
  loops: number;
  db: string | null;
}

function parseArgs(argv: readonly string[]): Options {
  const flag = (name: string): string | undefined => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const minutes = Number(flag("--minutes") ?? 5);
  const loops = Number(flag("--loops") ?? 16);
  if (!(minutes > 0)) throw new Error(`--minutes: expected a positive number, got ${flag("--minutes")}`);
  if (!Number.isInteger(loops) || loops < 1) throw new Error(`--loops: expected a whole number >= 1, got ${flag("--loops")}`);
  return { minutes, loops, db: flag("--db") ?? null };
}

/** CPU seconds (user + system) and resident memory (bytes) of a process, from /proc (Linux). */
function processUsage(pid: number): { cpuS: number; rssBytes: number } {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  const rssPages = Number(readFileSync(`/proc/${pid}/statm`, "utf8").split(" ")[1]);
  return { cpuS: (Number(fields[11]) + Number(fields[12])) / 100, rssBytes: rssPages * 4096 };
}

const fileBytes = (path: string): number => {
  let total = 0;
  for (const suffix of ["", "-wal"]) {
    try {
      total += statSync(path + suffix).size;
    } catch {
      // No WAL (yet).
    }
  }
  return total;
};

// ------------------------------------------------------------------------------------------------
// Requests

interface Claimed {
  rollout_id: string;
  attempt_id: string;
}

interface Call {
  kind: string;
  method: "GET" | "POST";
  path: string;
  body?: unknown;
  /** Raw body text (a malformed one), sent as JSON. */
  raw?: string;
  expect: number;
}

const JSON_HEADERS = { "content-type": "application/json" };

/** The store benchmarks' LLM-call span, without a sequence id (the server numbers a batch's spans), in a trace per turn. */
function llmSpan(c: Claimed, i: number, turn: number): Partial<Span> {
  const hex = (n: number, width: number) => n.toString(16).padStart(width, "0").slice(-width);
  const span: Partial<Span> = {
    ...makeLlmSpan(c.rollout_id, c.attempt_id, i),
    trace_id: hex(turn, 32),
    span_id: `${hex(turn, 8)}${hex(i, 8)}`,
  };
  delete span.sequence_id;
  return span;
}

function otlpExport(c: Claimed, turn: number): unknown {
  const attr = (key: string, value: string) => ({ key, value: { stringValue: value } });
  const hex = (n: number, width: number) => n.toString(16).padStart(width, "0").slice(-width);
  return {
    resourceSpans: [
      {
        resource: {
          attributes: [
            attr("service.name", "soak"),
            attr("agentlightning.rollout_id", c.rollout_id),
            attr("agentlightning.attempt_id", c.attempt_id),
          ],
        },
        scopeSpans: [
          {
            spans: [
              {
                traceId: hex(turn, 32),
                spanId: `ff${hex(turn, 14)}`,
                name: "tool.call",
                kind: 1,
                startTimeUnixNano: "1800000000000000000",
                endTimeUnixNano: "1800000001000000000",
                attributes: [attr("tool.name", "calculator")],
              },
            ],
          },
        ],
      },
    ],
  };
}

const READS = ["rollouts by status", "dashboard list", "rollout", "spans page", "statistics", "status counts", "metrics"] as const;
const BAD = ["malformed JSON", "unknown rollout", "bad query parameter", "schema violation"] as const;

/** One loop: a runner's turns, with the reads and bad requests of the others in between. */
class Loop {
  private readonly claimed: Claimed[] = [];
  private turn = 0;
  /** Rollouts this loop finished, newest last (for reads of one rollout and its spans). */
  private readonly finished: string[] = [];

  constructor(
    private readonly index: number,
    private readonly send: (call: Call) => Promise<unknown>,
  ) {}

  private get worker(): string {
    return `soak-worker-${this.index}`;
  }

  private remember(claim: unknown): void {
    const ar = claim as { rollout_id: string; attempt: { attempt_id: string } } | null;
    if (ar) this.claimed.push({ rollout_id: ar.rollout_id, attempt_id: ar.attempt.attempt_id });
  }

  async runTurn(): Promise<void> {
    const n = this.turn++;
    const seq = this.index * 1_000_000_000 + n;
    await this.send({
      kind: "enqueue",
      method: "POST",
      path: "/v1/agl/queues/rollouts/enqueue",
      body: { rollouts: [{ input: { question: "What is 2 + 2?", loop: this.index, turn: n } }] },
      expect: 201,
    });
    const got = (await this.send({
      kind: "dequeue",
      method: "POST",
      path: "/v1/agl/queues/rollouts/dequeue",
      body: { worker_id: this.worker, limit: 1 },
      expect: 200,
    })) as unknown[];
    for (const ar of got) this.remember(ar);
    await this.send({
      kind: "heartbeat",
      method: "POST",
      path: `/v1/agl/workers/${this.worker}`,
      body: { heartbeat_stats: { cpu: 0.5, turn: n } },
      expect: 200,
    });
    const current = this.claimed[0];
    if (current) {
      await this.send({
        kind: "span batch",
        method: "POST",
        path: "/v1/agl/spans/batch",
        body: { spans: [0, 1, 2, 3].map((i) => llmSpan(current, i, seq)) },
        expect: 201,
      });
      await this.send({ kind: "OTLP", method: "POST", path: "/v1/traces", body: otlpExport(current, seq), expect: 200 });
    }
    await this.send(this.read(n));
    await this.send(this.bad(n));
    if (current) {
      this.claimed.shift();
      const out = (await this.send({
        kind: "finish + claim",
        method: "POST",
        path: "/v1/agl/attempts/finish",
        body: { ...current, spans: [llmSpan(current, 4, seq)], attempt: { status: "succeeded" }, claim: { worker_id: this.worker } },
        expect: 200,
      })) as { next: unknown };
      this.remember(out.next);
      this.finished.push(current.rollout_id);
      if (this.finished.length > 100) this.finished.shift();
    }
  }

  private read(n: number): Call {
    const kind = READS[(n + this.index) % READS.length]!;
    const recent = this.finished[this.finished.length - 1 - (n % Math.max(1, this.finished.length))] ?? "ro-none";
    switch (kind) {
      case "rollouts by status":
        return { kind, method: "GET", path: "/v1/agl/rollouts?status_in=succeeded&limit=50", expect: 200 };
      case "dashboard list":
        return { kind, method: "GET", path: "/v1/agl/rollouts?sort_by=start_time&sort_order=desc&limit=50", expect: 200 };
      case "rollout":
        return { kind, method: "GET", path: `/v1/agl/rollouts/${recent}`, expect: 200 };
      case "spans page":
        return { kind, method: "GET", path: `/v1/agl/spans?rollout_id=${recent}&limit=100`, expect: 200 };
      case "statistics":
        return { kind, method: "GET", path: "/v1/agl/statistics", expect: 200 };
      case "status counts":
        return { kind, method: "GET", path: "/v1/agl/statistics/rollouts", expect: 200 };
      case "metrics":
        return { kind, method: "GET", path: "/metrics", expect: 200 };
    }
  }

  private bad(n: number): Call {
    const which = BAD[(n + this.index) % BAD.length]!;
    const kind = "bad request";
    switch (which) {
      case "malformed JSON":
        return { kind, method: "POST", path: "/v1/agl/queues/rollouts/enqueue", raw: '{"rollouts": [', expect: 400 };
      case "unknown rollout":
        return { kind, method: "POST", path: "/v1/agl/rollouts/ro-unknown", body: { status: "failed" }, expect: 404 };
      case "bad query parameter":
        return { kind, method: "GET", path: "/v1/agl/rollouts?limit=many", expect: 400 };
      case "schema violation":
        return { kind, method: "POST", path: "/v1/agl/queues/rollouts/dequeue", body: { limit: "one" }, expect: 400 };
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Recording

/** Latencies (ms) per kind of request within one minute. */
class Minute {
  readonly latencies = new Map<string, number[]>();
  requests = 0;
  startCpuS = 0;
  endCpuS = 0;
  rssBytes = 0;
  dbBytes = 0;
  seconds = 0;
  /** Server CPU seconds per request. */
  cpuPerRequest(): number {
    return (this.endCpuS - this.startCpuS) / this.requests;
  }
  record(kind: string, ms: number): void {
    let list = this.latencies.get(kind);
    if (!list) this.latencies.set(kind, (list = []));
    list.push(ms);
    this.requests++;
  }
}

const percentile = (sorted: readonly number[], p: number): number => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;

async function main(o: Options): Promise<void> {
  const dir = o.db === null ? mkdtempSync(join(tmpdir(), "agl-soak-")) : null;
  const path = o.db ?? join(dir!, "soak.db");
  const server = await startServerProcess("node", ["--port", "0", "--db", `file:${path}`, "--log-level", "warning"]).catch((e: unknown) => {
    if (dir !== null) rmSync(dir, { recursive: true, force: true });
    throw e;
  });
  const pid = server.proc.pid!;
  const pool = new Pool(server.url, { connections: o.loops, pipelining: 1 });
  const unexpected = new Map<string, number>();
  const minutes: Minute[] = [];
  let minute = new Minute();
  const load0 = loadavg();

  const send = async (call: Call): Promise<unknown> => {
    const t0 = performance.now();
    const res = await pool.request({
      method: call.method,
      path: call.path,
      headers: call.method === "POST" ? JSON_HEADERS : undefined,
      body: call.raw ?? (call.body === undefined ? undefined : JSON.stringify(call.body)),
    });
    const text = await res.body.text();
    minute.record(call.kind, performance.now() - t0);
    if (res.statusCode !== call.expect) {
      const key = `${call.kind} ${call.method} ${call.path.split("?")[0]} -> ${res.statusCode}: ${text.slice(0, 160)}`;
      unexpected.set(key, (unexpected.get(key) ?? 0) + 1);
      return call.expect === 200 && call.kind === "dequeue" ? [] : { next: null };
    }
    return res.headers["content-type"]?.toString().startsWith("application/json") ? JSON.parse(text) : text;
  };

  console.log(
    `soaking the store server (node, libSQL file ${path}) for ${o.minutes} min with ${o.loops} loops; ` +
      `load average ${load0.map((l) => l.toFixed(1)).join(" ")} on ${availableParallelism()} CPUs`,
  );
  const t0 = performance.now();
  const end = t0 + o.minutes * 60_000;
  let minuteStart = t0;
  minute.startCpuS = processUsage(pid).cpuS;
  const closeMinute = (now: number) => {
    const usage = processUsage(pid);
    minute.endCpuS = usage.cpuS;
    minute.rssBytes = usage.rssBytes;
    minute.dbBytes = fileBytes(path);
    minute.seconds = (now - minuteStart) / 1000;
    minutes.push(minute);
    const m = minute;
    console.log(
      `minute ${minutes.length}: ${Math.round(m.requests / m.seconds).toLocaleString("en-US")} req/s, ` +
        `server CPU ${(1000 * m.cpuPerRequest()).toFixed(3)} ms/request, ` +
        `RSS ${(m.rssBytes / 2 ** 20).toFixed(0)} MiB, database ${(m.dbBytes / 2 ** 20).toFixed(0)} MiB, load ${loadavg()[0]!.toFixed(1)}`,
    );
    minute = new Minute();
    minute.startCpuS = usage.cpuS;
    minuteStart = now;
  };
  const ticker = setInterval(() => {
    const now = performance.now();
    if (now - minuteStart >= 60_000 - 50 && now < end - 1000) closeMinute(now);
  }, 200);

  const loops = Array.from({ length: o.loops }, (_, i) => new Loop(i, send));
  try {
    await Promise.all(
      loops.map(async (loop) => {
        while (performance.now() < end) await loop.runTurn();
      }),
    );
    clearInterval(ticker);
    closeMinute(performance.now());
  } finally {
    clearInterval(ticker);
    await pool.close();
    const code = await server.stop("SIGTERM");
    if (dir !== null) rmSync(dir, { recursive: true, force: true });
    if (code !== 0) console.error(`the server exited with ${code}:\n${server.output()}`);
  }
  report(minutes, unexpected, load0[0]!);
}

function report(minutes: readonly Minute[], unexpected: ReadonlyMap<string, number>, load0: number): void {
  const fmt = (n: number) => Math.round(n).toLocaleString("en-US");
  const ms = (n: number) => (n < 10 ? n.toFixed(1) : n.toFixed(0));
  const kinds = [...new Set(minutes.flatMap((m) => [...m.latencies.keys()]))];
  console.log(`\np50 / p99 latency (ms) per kind of request, per minute:\n`);
  console.log(`| request | ${minutes.map((_, i) => `min ${i + 1}`).join(" | ")} |`);
  console.log(`|---|${minutes.map(() => "---:").join("|")}|`);
  for (const kind of kinds) {
    const cells = minutes.map((m) => {
      const l = [...(m.latencies.get(kind) ?? [])].sort((a, b) => a - b);
      return l.length ? `${ms(percentile(l, 0.5))} / ${ms(percentile(l, 0.99))}` : "–";
    });
    console.log(`| ${kind} | ${cells.join(" | ")} |`);
  }
  const all = (m: Minute) => [...m.latencies.values()].flat().sort((a, b) => a - b);
  console.log(`| all | ${minutes.map((m) => `${ms(percentile(all(m), 0.5))} / ${ms(percentile(all(m), 0.99))}`).join(" | ")} |`);
  console.log(`| requests/s | ${minutes.map((m) => fmt(m.requests / m.seconds)).join(" | ")} |`);
  console.log(`| server CPU ms/request | ${minutes.map((m) => (1000 * m.cpuPerRequest()).toFixed(3)).join(" | ")} |`);
  console.log(`| server RSS (MiB) | ${minutes.map((m) => fmt(m.rssBytes / 2 ** 20)).join(" | ")} |`);
  console.log(`| database + WAL (MiB) | ${minutes.map((m) => fmt(m.dbBytes / 2 ** 20)).join(" | ")} |`);
  const first = minutes[0]!;
  const last = minutes[minutes.length - 1]!;
  const ratio = last.requests / last.seconds / (first.requests / first.seconds);
  console.log(
    `\nlast minute / first minute: ${fmt(last.requests / last.seconds)} / ${fmt(first.requests / first.seconds)} req/s = ${ratio.toFixed(2)}; ` +
      `goal >= ${GOAL}: ${ratio >= GOAL ? "met" : "NOT met"}`,
  );
  // The rate follows the machine's other load; the server's CPU time per request much less so.
  console.log(`server CPU per request, last minute / first minute: ${(last.cpuPerRequest() / first.cpuPerRequest()).toFixed(2)}`);
  console.log(`load average ${load0.toFixed(1)} -> ${loadavg()[0]!.toFixed(1)} on ${availableParallelism()} CPUs`);
  if (unexpected.size > 0) {
    console.error("\nunexpected answers:");
    for (const [what, n] of unexpected) console.error(`  ${n} x ${what}`);
    process.exitCode = 1;
  }
}

await main(parseArgs(process.argv.slice(2)));
