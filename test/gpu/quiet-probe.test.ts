/**
 * Looking for WebGPU prints nothing: on Node, probeGpu asks Dawn in a child process, so Dawn's own
 * warnings (lavapipe's limits "artificially reduced" on stderr) stay out of a command that ends on the
 * CPU, such as `agl serve --device auto` on a software adapter. Its report is requestGpuDevice's.
 */
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { parseModelConfig } from "../../src/model/config.ts";
import { saveHfModel } from "../../src/model/hf/index.ts";
import { initParams } from "../../src/model/init.ts";
import { QWEN_TOKENIZER_DIR } from "../model/hf/qwen-files.ts";
import { runOnRuntime } from "../runtimes.ts";
import { startServerProcess } from "../server/processes.ts";

const dir = mkdtempSync(join(tmpdir(), "agl-quiet-probe-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const run = (what: "probe" | "device") => runOnRuntime("node", "test/gpu/fixtures/probe-or-device.ts", { args: [what], timeout: 60_000 });

describe("probing WebGPU on Node", () => {
  it("prints nothing and reports what requestGpuDevice reports", async () => {
    const probe = await run("probe");
    expect(probe.code).toBe(0);
    expect(probe.stderr).toBe("");
    expect(probe.stdout.trim().split("\n")).toHaveLength(1);
    const device = await run("device");
    expect(JSON.parse(probe.stdout)).toEqual(JSON.parse(device.stdout.trim().split("\n").pop()!));
  }, 120_000);

  it("agl serve --device auto prints no Dawn warning", async () => {
    const config = parseModelConfig({
      vocab_size: 151936,
      d_model: 16,
      n_layers: 1,
      n_heads: 2,
      n_kv_heads: 1,
      d_ff: 32,
      max_seq_len: 64,
      rope_theta: 1000000,
      norm_eps: 1e-6,
      tie_embeddings: true,
      qkv_bias: true,
    });
    await saveHfModel(dir, { config, params: initParams(config, 1), dtype: "BF16" });
    for (const f of ["tokenizer.json", "tokenizer_config.json"]) copyFileSync(join(QWEN_TOKENIZER_DIR, f), join(dir, f));
    const proc = await startServerProcess("node", ["serve", "--model", dir, "--port", "0", "--device", "auto"], {}, / at (http:\/\/\S+)/);
    try {
      expect(proc.output()).not.toMatch(/artificially|Warning:/);
    } finally {
      await proc.stop("SIGTERM");
    }
  }, 120_000);
});
