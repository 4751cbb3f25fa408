/**
 * The GPU-host kit's bundles (bench/gpu-host/bundle.mjs): its build-time rewrites still find their text in
 * src/ and bench/ (the build fails otherwise), and a bundle run from a folder without node_modules loads
 * dawn.node from LIGHTNING_DAWN_NODE: a path there that does not exist is what its "no WebGPU adapter" line names.
 */
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const work = mkdtempSync(join(tmpdir(), "gpu-host-kit-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("bench/gpu-host/bundle.mjs", () => {
  it("bundles the benchmarks so that one runs alone and takes dawn.node from LIGHTNING_DAWN_NODE", () => {
    const built = spawnSync(process.execPath, [join(root, "bench/gpu-host/bundle.mjs"), join(work, "bundles")], { encoding: "utf8" });
    expect(built.stderr).toBe("");
    expect(built.status).toBe(0);
    const alone = join(work, "alone");
    mkdirSync(alone);
    copyFileSync(join(work, "bundles/gpu.mjs"), join(alone, "gpu.mjs"));
    const missing = join(work, "no-such-dir/dawn.node");
    const run = spawnSync(process.execPath, [join(alone, "gpu.mjs")], {
      cwd: alone,
      encoding: "utf8",
      env: { ...process.env, LIGHTNING_DAWN_NODE: missing },
    });
    expect(run.stderr).toBe("");
    expect(run.stdout).toContain("no WebGPU adapter here");
    expect(run.stdout).toContain(missing);
    expect(run.status).toBe(0);
  });
});
