/**
 * The store server's memory while it answers `GET /v1/agl/rollouts?limit=-1` (every rollout) for a large
 * store. The server runs in a child process of its own (this file with `--serve`), so the client's memory
 * is not counted; it samples its heap (`heapUsed + external`, the JavaScript objects and buffers) and its
 * resident set every 2 ms from just before the request until the answer has been sent. What it reports is
 * the peak above the level measured, after a garbage collection, before the request.
 *
 * Two answers from the same store file, in the same run: the list route as it is (read in batches,
 * streamed), and the baseline, a route that reads the whole answer and sends it as one JSON string
 * (`c.json`), which is what answering everything would cost without streaming. Each is read twice: by a
 * client reading as fast as it can, and by a slow one (a pause after each 64 KiB) that makes the server
 * wait on the socket.
 *
 * Run: `npx tsx bench/list-memory.ts [--rollouts 100000] [--db libsql|memory]`.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import type { AddressInfo } from "node:net";
import { createStoreApp } from "../src/server/index.ts";
import { openServerStore } from "../src/server/open-store.ts";

const arg = (name: string, fallback: string): string => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : fallback;
};
const ROLLOUTS = Number(arg("rollouts", "100000"));
const DB = arg("db", "libsql");
const MIB = 2 ** 20;

interface Peak {
  heapMiB: number;
  rssMiB: number;
}

/** The child: opens the store, fills it when asked, serves both routes, and measures itself around each request. */
async function serveChild(db: string, fill: number): Promise<void> {
  const { store } = await openServerStore(db);
  for (let i = 0; i < fill; i += 5_000)
    await store.enqueueManyRollouts(
      Array.from({ length: Math.min(5_000, fill - i) }, (_, k) => ({
        input: { task: `question ${i + k}`, answer: i + k },
        metadata: { i: i + k },
      })),
    );
  const gc = (globalThis as { gc?: () => void }).gc!;
  let sampler: ReturnType<typeof setInterval> | null = null;
  let base = { heap: 0, rss: 0 };
  let peak = { heap: 0, rss: 0 };
  const sample = () => {
    const m = process.memoryUsage();
    peak = { heap: Math.max(peak.heap, m.heapUsed + m.external), rss: Math.max(peak.rss, m.rss) };
  };
  const app = new Hono();
  app.get("/start", (c) => {
    gc();
    const m = process.memoryUsage();
    base = { heap: m.heapUsed + m.external, rss: m.rss };
    peak = { ...base };
    sampler = setInterval(sample, 2);
    return c.text("ok");
  });
  app.get("/peak", (c) => {
    sample();
    if (sampler) clearInterval(sampler);
    return c.json({ heapMiB: (peak.heap - base.heap) / MIB, rssMiB: (peak.rss - base.rss) / MIB } satisfies Peak);
  });
  app.get("/one-string", async (c) => c.json(await store.queryRollouts({})));
  app.route("/", createStoreApp(store, { metrics: false }));
  const server = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 }, () => {
    console.log(`READY ${(server.address() as AddressInfo).port}`);
  });
}

/** Starts a child serving `db`; resolves with its URL once it listens. */
function startChild(db: string, fill: number): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(
    process.execPath,
    ["--expose-gc", "--import", "tsx", fileURLToPath(import.meta.url), "--serve", db, "--fill", String(fill)],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /READY (\d+)/.exec(out);
      if (m) resolve({ url: `http://127.0.0.1:${m[1]}`, child });
    });
    child.once("exit", (code) => reject(new Error(`the server exited with ${code}: ${out}`)));
  });
}

function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    child.removeAllListeners("exit");
    child.once("exit", () => resolve());
    child.kill("SIGTERM");
  });
}

/** Reads an answer to the end, keeping nothing but its length; `slow` pauses 2 ms after each 64 KiB. */
async function drain(href: string, slow: boolean): Promise<number> {
  const res = await fetch(href);
  const reader = res.body!.getReader();
  let bytes = 0;
  let sincePause = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return bytes;
    bytes += value.length;
    sincePause += value.length;
    if (slow && sincePause >= 64 * 1024) {
      sincePause = 0;
      await new Promise((r) => setTimeout(r, 2));
    }
  }
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "agl-list-memory-"));
  // The in-memory store lives in the child: each child fills its own; a libSQL file is filled once.
  const db = DB === "memory" ? "memory" : `file:${join(dir, "store.db")}`;
  try {
    if (DB !== "memory") {
      const filler = await startChild(db, ROLLOUTS);
      await stop(filler.child);
    }
    const rows: string[] = [];
    for (const [label, path] of [
      ["streamed (the list route)", "/v1/agl/rollouts?limit=-1"],
      ["one JSON string (baseline)", "/one-string"],
    ] as const) {
      for (const slow of [false, true]) {
        const { url, child } = await startChild(db, DB === "memory" ? ROLLOUTS : 0);
        try {
          // A first request warms the route up (code compiled, caches filled) so the peak is the answer's.
          await drain(`${url}${path}`, false);
          await fetch(`${url}/start`);
          const t0 = performance.now();
          const bytes = await drain(`${url}${path}`, slow);
          const ms = performance.now() - t0;
          const peak = (await (await fetch(`${url}/peak`)).json()) as Peak;
          rows.push(
            `${label}, ${slow ? "slow" : "fast"} reader: ${(bytes / MIB).toFixed(1)} MiB in ${ms.toFixed(0)} ms; ` +
              `peak above the level before: heap ${peak.heapMiB.toFixed(1)} MiB, RSS ${peak.rssMiB.toFixed(1)} MiB`,
          );
          console.log(rows.at(-1));
        } finally {
          await stop(child);
        }
      }
    }
    console.log(`${ROLLOUTS} rollouts, --db ${DB}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv.includes("--serve")) await serveChild(arg("serve", "memory"), Number(arg("fill", "0")));
else await main();
