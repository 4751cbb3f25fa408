/**
 * The same server under Node, Deno and Bun as real processes: the embedded libSQL file, the token from
 * AGL_STORE_TOKEN, OTLP, graceful shutdown on SIGINT (held polls answered, database closed, exit 0)
 * and the data still there after a restart.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT_CONTEXT, trace } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { CompressionAlgorithm } from "@opentelemetry/otlp-exporter-base";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BasicTracerProvider, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { afterAll, describe, expect, it } from "vitest";
import { LightningStoreClient } from "../../src/client/index.ts";
import { LightningResourceAttributes as R, spanFromAttributes } from "../../src/types/index.ts";
import { startServerProcess } from "./processes.ts";
import { RUNTIMES } from "../runtimes.ts";

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe.each(RUNTIMES)("agl store under %s", (runtime) => {
  it("serves a libSQL file with a token, stops gracefully on SIGINT and keeps the data", async () => {
    const dir = mkdtempSync(join(tmpdir(), `agl-${runtime}-`));
    dirs.push(dir);
    const db = `file:${join(dir, "store.db")}`;
    const env = { AGL_STORE_TOKEN: "tok-123" };
    const first = await startServerProcess(runtime, ["--port", "0", "--db", db], env);
    expect(first.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(first.output()).toContain(`embedded libSQL file ${join(dir, "store.db")}`);
    expect((await fetch(`${first.url}/v1/agl/statistics`)).status).toBe(401);
    // A second server on the same port fails clearly, with exit code 1.
    const port = new URL(first.url).port;
    const clash = await startServerProcess(runtime, ["--port", port, "--db", "memory"]).then(
      () => null,
      (e: unknown) => e as Error,
    );
    expect(clash?.message).toMatch(/exited with 1/);
    expect(clash?.message).toMatch(/agl store: .*(in use|AddrInUse|EADDRINUSE)/i);

    const client = new LightningStoreClient(first.url, { token: "tok-123" });
    const r = await client.startRollout({ task: runtime });
    const added = await client.addManySpans(
      [1, 2, 3].map((i) =>
        spanFromAttributes({ rollout_id: r.rollout_id, attempt_id: r.attempt.attempt_id, sequence_id: i, name: `s${i}` }),
      ),
    );
    expect(added).toHaveLength(3);

    // OTLP/HTTP protobuf, gzipped, with the token, into this runtime's server.
    const provider = new BasicTracerProvider({
      resource: resourceFromAttributes({ [R.ROLLOUT_ID]: r.rollout_id, [R.ATTEMPT_ID]: r.attempt.attempt_id }),
      spanProcessors: [
        new SimpleSpanProcessor(
          new OTLPTraceExporter({
            url: `${first.url}/v1/traces`,
            compression: CompressionAlgorithm.GZIP,
            headers: { authorization: "Bearer tok-123" },
          }),
        ),
      ],
    });
    const tracer = provider.getTracer("runtime-test");
    const root = tracer.startSpan("otlp-root");
    tracer.startSpan("otlp-child", {}, trace.setSpan(ROOT_CONTEXT, root)).end();
    root.end();
    await provider.shutdown();
    const otlp = (await client.querySpans(r.rollout_id)).items.filter((s) => s.name.startsWith("otlp-"));
    expect(otlp.map((s) => s.name).sort()).toEqual(["otlp-child", "otlp-root"]);
    expect(otlp.find((s) => s.name === "otlp-child")!.parent_id).toBe(root.spanContext().spanId);
    expect(otlp.map((s) => s.sequence_id).sort()).toEqual([4, 5]);

    // A held long poll is answered when the server shuts down; the process exits 0.
    const held = fetch(`${first.url}/v1/agl/waits/rollouts`, {
      method: "POST",
      headers: { authorization: "Bearer tok-123", "content-type": "application/json" },
      body: JSON.stringify({ rollout_ids: [r.rollout_id], timeout: 25 }),
    });
    await new Promise((res) => setTimeout(res, 300));
    const t0 = performance.now();
    const exit = first.stop("SIGINT");
    const answered = await held;
    expect(answered.status).toBe(200);
    expect(await exit).toBe(0);
    expect(performance.now() - t0).toBeLessThan(10_000);
    expect(first.output()).toContain("stopped; database closed");

    const second = await startServerProcess(runtime, ["--port", "0", "--db", db], env);
    try {
      const again = new LightningStoreClient(second.url, { token: "tok-123" });
      expect((await again.getRolloutById(r.rollout_id))?.input).toEqual({ task: runtime });
      expect((await again.querySpans(r.rollout_id)).items.map((s) => s.name).slice(0, 3)).toEqual(["s1", "s2", "s3"]);
      expect((await again.querySpans(r.rollout_id)).total).toBe(5);
    } finally {
      expect(await second.stop("SIGTERM")).toBe(0);
    }
  });

  it("refuses an unknown option with exit code 2 and the usage", async () => {
    const err = await startServerProcess(runtime, ["--prot", "1"]).then(
      () => null,
      (e: unknown) => e as Error,
    );
    expect(err?.message).toMatch(/exited with 2/);
    expect(err?.message).toContain("unknown option");
    expect(err?.message).toContain("Usage: agl store");
  });
});
