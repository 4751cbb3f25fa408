/**
 * A lost device (here: destroyed under the trainer, as a driver reset or a browser reclaiming the GPU
 * would leave it) makes every trainer call throw GpuDeviceLostError, and a checkpoint taken after the loss
 * writes nothing, so the last good checkpoint stays the one to resume from. test/browser/page.test.ts
 * runs the same in a Chromium tab.
 */
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { saveTrainerCheckpoint } from "../../src/algorithm/grpo.ts";
import { GpuDeviceLostError } from "../../src/gpu/device.ts";
import { GpuPolicyTrainer } from "../../src/gpu/trainer.ts";
import { loadCheckpoint } from "../../src/model/checkpoint.ts";
import { deviceLoss } from "../browser/scenarios.ts";
import { noGpu } from "./gpu-env.ts";

const dir = mkdtempSync(join(tmpdir(), "agl-lost-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(noGpu)("a lost GPU device", { timeout: 120_000 }, () => {
  it("fails every trainer call with GpuDeviceLostError, naming the reason", async () => {
    const result = await deviceLoss();
    expect(result).toEqual({
      stepBefore: true,
      errors: ["GpuDeviceLostError destroyed", "GpuDeviceLostError destroyed", "GpuDeviceLostError destroyed"],
    });
  });

  it("writes no checkpoint after the loss; the one before it still loads", async () => {
    const { TINY } = await import("../browser/scenarios.ts");
    const trainer = await GpuPolicyTrainer.create({ config: TINY, seed: 1 });
    await saveTrainerCheckpoint(join(dir, "good"), trainer);
    const good = await loadCheckpoint(join(dir, "good"));
    trainer.ctx.device.destroy();
    await new Promise((ok) => setTimeout(ok, 10));
    await expect(saveTrainerCheckpoint(join(dir, "after"), trainer)).rejects.toBeInstanceOf(GpuDeviceLostError);
    expect(existsSync(join(dir, "after"))).toBe(false);
    expect((await loadCheckpoint(join(dir, "good"))).params).toEqual(good.params);
    trainer.destroy(); // safe on a lost device
  });
});
