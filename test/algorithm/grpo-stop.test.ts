/** GRPO's `signal`: Stop ends the run after the step in progress, which is validated and checkpointed as a last step. */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { CHECKPOINT } from "../../examples/tab/build.ts";
import { calcTabAgent } from "../../examples/tab/agents.ts";
import { runTab } from "../../examples/tab/loop.ts";
import { decodeModel } from "../../src/model/checkpoint.ts";

describe("GRPO with a stop signal", () => {
  it("finishes the step in progress, validates it, checkpoints it and returns", async () => {
    const stop = new AbortController();
    const checkpoints: number[] = [];
    const r = await runTab({
      agent: calcTabAgent(new Uint8Array(readFileSync(CHECKPOINT))),
      backend: "cpu",
      steps: 50,
      batch: 2,
      n: 4,
      valTasks: 4,
      valEvery: 10,
      runners: 2,
      signal: stop.signal,
      onReport: (rep) => {
        if (rep.kind === "step" && rep.step === 2) stop.abort();
      },
      onCheckpoint: (_, step) => checkpoints.push(step),
    });
    expect(r.reports.map((rep) => `${rep.kind} ${rep.step}`)).toEqual(["validation 0", "step 1", "step 2", "validation 2"]);
    expect(checkpoints).toEqual([1, 2]);
    expect(decodeModel(r.files["model.safetensors"]!).step).toBe(2);
  });
});
