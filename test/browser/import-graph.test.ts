/**
 * The browser entry (src/browser.ts) reaches no `node:*` module or Node built-in: its own files through
 * the import walker (which names the chain when one does), and the packages it imports through a real
 * bundler build for the browser (esbuild, platform "browser", which refuses Node built-ins).
 * test/browser/dist.test.ts checks the same on the built dist/.
 */
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { describe, expect, it } from "vitest";
import { importGraph } from "./import-graph.ts";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

describe("the browser entry's import graph (src/)", () => {
  const graph = importGraph(join(root, "src/browser.ts"), root);

  it("reaches no node:* module or Node built-in", () => {
    expect(graph.violations).toEqual([]);
    // The parts it promises are in the graph (a walk that stopped early would pass vacuously).
    for (const f of [
      "src/client/client.ts",
      "src/wasm/loader.ts",
      "src/gpu/trainer.ts",
      "src/model/hf/loader.ts",
      "src/algorithm/grpo-step.ts",
      "src/store/memory.ts",
      "src/tracer/otel.ts",
      "src/runner/runner.ts",
      "src/trainer/shm.ts",
      "src/proxy/policy-server.ts",
      "src/platform/stack-context.ts",
    ])
      expect(graph.files).toContain(join(root, f));
    // the client-server strategy (processes, a server) stays out: the trainer registers it from its package entry
    expect(graph.files).not.toContain(join(root, "src/trainer/cs.ts"));
    expect(graph.packages).toEqual([
      "@huggingface/jinja",
      "@huggingface/tokenizers",
      "@opentelemetry/api",
      "@opentelemetry/resources",
      "@opentelemetry/sdk-trace-base",
      "hono",
      "hono/bearer-auth",
      "hono/body-limit",
      "hono/http-exception",
      "zod",
    ]);
  });

  it("finds the Node built-ins the package root reaches, with the chain (why the browser has its own entry)", () => {
    const rootGraph = importGraph(join(root, "src/index.ts"), root);
    const worker = rootGraph.violations.find((v) => v.specifier === "node:worker_threads");
    expect(worker?.chain[0]).toBe("src/index.ts");
    expect(worker?.chain.at(-1)).toBe("src/store/libsql/checkpointer.ts");
  });

  it("bundles for the browser with its packages (no Node built-in anywhere in node_modules either)", async () => {
    const result = await build({
      entryPoints: [join(root, "src/browser.ts")],
      bundle: true,
      platform: "browser",
      format: "esm",
      target: "es2022",
      write: false,
      metafile: true,
      logLevel: "silent",
    });
    expect(result.errors).toEqual([]);
    const inputs = Object.keys(result.metafile.inputs);
    expect(inputs.some((f) => f.includes("node_modules/@huggingface/tokenizers"))).toBe(true);
    expect(
      inputs.filter(
        (f) =>
          f.includes("src/platform/node.ts") ||
          f.includes("@hono/node-server") ||
          f.includes("@opentelemetry/context-async-hooks") ||
          f.includes("node_modules/undici"),
      ),
    ).toEqual([]);
  });
});

describe("the tab page's import graph (examples/tab/)", () => {
  it("reaches no node:* module from the page or its worker, the Calc-X agent and its calculator included", () => {
    const worker = importGraph(join(root, "examples/tab/worker.ts"), root);
    expect(worker.violations).toEqual([]);
    // the Calc-X agent's runtime-neutral half is there; its Node half (the calculator over stdio) is not
    expect(worker.files).toContain(join(root, "examples/calc-x/agent-loop.ts"));
    expect(worker.files).toContain(join(root, "examples/calc-x/tool-server.ts"));
    expect(worker.files).not.toContain(join(root, "examples/calc-x/agent.ts"));
    expect(worker.files).not.toContain(join(root, "examples/calc-x/mcp.ts"));
    expect(worker.packages).toContain("@modelcontextprotocol/sdk/inMemory.js");
    expect(importGraph(join(root, "examples/tab/main.ts"), root).violations).toEqual([]);
  });
});
