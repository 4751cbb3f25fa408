/**
 * What the LLM proxy (src/proxy/llm-proxy.ts) adds to a call: latency (median, p90) and the proxy
 * process's CPU time per call, non-streamed and streamed, against calling the same upstream directly,
 * both measured in the same run with the calls interleaved. The upstream is a scripted OpenAI-compatible
 * server in its own process (a fixed chat answer, or a fixed 32-chunk SSE stream, with vLLM-style token
 * ids); the proxy runs in a second process with an in-memory store, and every proxied call goes under
 * the rollout prefix, so it takes a sequence id and writes its span as in training. Beside it in that
 * process, a bare pass-through (Hono + fetch, nothing parsed or recorded) measures what the extra HTTP
 * hop alone costs. The client is this process, one call at a time. Goal: < 1 ms added per call.
 *
 * Run: `npx tsx bench/proxy.ts [--calls 400]` (or `npm run bench -- proxy`). Linux (/proc for CPU time).
 */
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { availableParallelism, loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { Hono } from "hono";
import { LLMProxy } from "../src/proxy/llm-proxy.ts";
import { nodeServe } from "../src/proxy/openai-http.ts";
import { InMemoryLightningStore } from "../src/store/memory.ts";
import { runnerFetch } from "../src/trainer/runner-fetch.ts";

const GOAL_MS = 1;
const CHUNKS = 32;

/** CPU seconds (user + system) a process has used so far, from /proc/<pid>/stat. */
function processCpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

const answer = {
  id: "chatcmpl-bench",
  object: "chat.completion",
  created: 0,
  model: "bench",
  prompt_token_ids: Array.from({ length: 60 }, (_, i) => 1000 + i),
  choices: [
    {
      index: 0,
      message: { role: "assistant", content: "The answer is 42. ".repeat(8) },
      finish_reason: "stop",
      token_ids: Array.from({ length: CHUNKS }, (_, i) => 2000 + i),
    },
  ],
  usage: { prompt_tokens: 60, completion_tokens: CHUNKS, total_tokens: 60 + CHUNKS },
};
const sse =
  Array.from({ length: CHUNKS }, (_, i) => {
    const chunk = {
      id: "chatcmpl-bench",
      object: "chat.completion.chunk",
      created: 0,
      model: "bench",
      ...(i === 0 ? { prompt_token_ids: answer.prompt_token_ids } : {}),
      choices: [{ index: 0, delta: { content: "tok " }, finish_reason: i === CHUNKS - 1 ? "stop" : null, token_ids: [2000 + i] }],
    };
    return `data: ${JSON.stringify(chunk)}\n\n`;
  }).join("") + "data: [DONE]\n\n";

async function runUpstream(): Promise<void> {
  const app = new Hono();
  app.post("/v1/chat/completions", async (c) => {
    const body = (await c.req.json()) as { stream?: boolean };
    if (!body.stream) return c.json(answer);
    return new Response(sse, { headers: { "content-type": "text/event-stream" } });
  });
  const h = await (await nodeServe())(app.fetch, { hostname: "127.0.0.1", port: 0 });
  console.log(`READY http://127.0.0.1:${h.port}/v1`);
}

async function runProxy(upstream: string): Promise<void> {
  const store = new InMemoryLightningStore();
  const r = await store.startRollout({ bench: true });
  // As `agl proxy` runs it: whole answers over undici's pools on Node.
  const proxy = new LLMProxy({
    models: [{ name: "bench", upstreams: [upstream], params: { return_token_ids: true } }],
    store,
    fetchWhole: runnerFetch(),
  });
  await proxy.start();
  // The floor: the same extra hop with nothing done, the body forwarded with fetch and the answer returned as it came.
  const bare = new Hono();
  bare.post("/v1/chat/completions", async (c) => {
    const res = await fetch(`${upstream}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: await c.req.text(),
    });
    return new Response(res.body, {
      status: res.status,
      headers: { "content-type": res.headers.get("content-type") ?? "application/json" },
    });
  });
  const h = await (await nodeServe())(bare.fetch, { hostname: "127.0.0.1", port: 0 });
  console.log(
    `READY ${proxy.asResource({ rolloutId: r.rollout_id, attemptId: r.attempt.attempt_id }).endpoint} http://127.0.0.1:${h.port}/v1`,
  );
}

function child(args: string[]): Promise<{ url: string; bare: string; pid: number; kill(): void }> {
  const proc = spawn(process.execPath, ["--import", "tsx", fileURLToPath(import.meta.url), ...args], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  return new Promise((resolve, reject) => {
    let out = "";
    proc.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /READY (\S+)(?: (\S+))?\n/.exec(out);
      if (m) resolve({ url: m[1]!, bare: m[2] ?? "", pid: proc.pid!, kill: () => proc.kill() });
    });
    proc.once("exit", (code) => reject(new Error(`${args[0]} exited with ${code}: ${out}`)));
  });
}

async function call(base: string, stream: boolean): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(`${base}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "bench", messages: [{ role: "user", content: "What is 6 x 7?" }], stream }),
  });
  const text = await res.text();
  if (!res.ok || text.length < 100) throw new Error(`call failed: ${res.status} ${text}`);
  return performance.now() - t0;
}

const quantile = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
};

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args[0] === "--upstream") return runUpstream();
  if (args[0] === "--proxy") return runProxy(args[1]!);
  const calls = args[0] === "--calls" ? Number(args[1]) : 400;
  const upstream = await child(["--upstream"]);
  const proxy = await child(["--proxy", upstream.url]);
  const rows: string[] = [];
  let worst = 0;
  try {
    for (const stream of [false, true]) {
      for (let i = 0; i < 50; i++) await Promise.all([call(upstream.url, stream), call(proxy.bare, stream), call(proxy.url, stream)]); // warm-up
      const direct: number[] = [];
      const bare: number[] = [];
      const proxied: number[] = [];
      let proxyCpu = 0;
      let bareCpu = 0;
      for (let i = 0; i < calls; i++) {
        direct.push(await call(upstream.url, stream));
        let cpu0 = processCpuSeconds(proxy.pid);
        bare.push(await call(proxy.bare, stream));
        bareCpu += processCpuSeconds(proxy.pid) - cpu0;
        cpu0 = processCpuSeconds(proxy.pid);
        proxied.push(await call(proxy.url, stream));
        proxyCpu += processCpuSeconds(proxy.pid) - cpu0;
      }
      const added = (xs: number[], q: number) => quantile(xs, q) - quantile(direct, q);
      worst = Math.max(worst, added(proxied, 0.5));
      const kind = stream ? `streamed (${CHUNKS} chunks)` : "not streamed";
      const ms = (xs: number[]) => `${quantile(xs, 0.5).toFixed(2)} / ${quantile(xs, 0.9).toFixed(2)}`;
      const addedMs = (xs: number[]) => `${added(xs, 0.5).toFixed(2)} / ${added(xs, 0.9).toFixed(2)}`;
      rows.push(`| ${kind} | direct | ${ms(direct)} | | |`);
      rows.push(`| ${kind} | bare pass-through hop | ${ms(bare)} | ${addedMs(bare)} | ${((bareCpu / calls) * 1000).toFixed(2)} |`);
      rows.push(`| ${kind} | LLMProxy (span stored) | ${ms(proxied)} | ${addedMs(proxied)} | ${((proxyCpu / calls) * 1000).toFixed(2)} |`);
    }
  } finally {
    proxy.kill();
    upstream.kill();
  }
  const load = loadavg()[0]!.toFixed(1);
  console.log(`LLM proxy overhead, ${calls} calls each way, one at a time (ms); load average ${load} on ${availableParallelism()} cores\n`);
  console.log("| call | path | latency median / p90 | added median / p90 | CPU per call in the middle process |");
  console.log("|---|---|---|---|---|");
  for (const r of rows) console.log(r);
  console.log(
    `\nmedian added ${worst.toFixed(2)} ms per call at worst: ${worst < GOAL_MS ? "meets" : "MISSES"} the goal of < ${GOAL_MS} ms`,
  );
}

await main();
