/**
 * Run under Node (tsx), Deno and Bun by push-runtimes.test.ts, as an agent process would: writes metrics
 * through `PrometheusMetricsBackend` (this process's registry), talks to the store server given as the
 * last argument, and closes its client, which sends them. Prints a JSON report on the last line.
 */
import { LightningStoreClient, PrometheusMetricsBackend } from "../../src/index.ts";

const g = globalThis as { Deno?: unknown; Bun?: unknown };
const runtime = g.Deno ? "deno" : g.Bun ? "bun" : "node";
const url = process.argv[process.argv.length - 1]!;

const metrics = new PrometheusMetricsBackend();
metrics.registerCounter("agent.tool_calls", ["tool", "runtime"]);
metrics.registerHistogram("agent.tool_seconds", ["runtime"], [0.1, 1]);
metrics.registerGauge("agent.last_reward", ["runtime"]);
metrics.incCounter("agent.tool_calls", 3, { tool: "calc", runtime });
metrics.observeHistogram("agent.tool_seconds", 0.5, { runtime });
metrics.setGauge("agent.last_reward", 0.75, { runtime });

const client = new LightningStoreClient(url);
await client.enqueueRollout({ runtime });
await client.close();
console.log(JSON.stringify({ runtime }));
