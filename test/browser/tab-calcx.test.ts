/**
 * examples/tab with `?agent=calc-x` in Chromium (headless, SwiftShader WebGPU): the static page loads the
 * Calc-X model folder over fetch and trains the Calc-X tool agent in the tab, its calculator MCP server in
 * the tab too (linked in memory), through the in-process policy server, a LoRA adapter at the trajectory
 * level (one row per rollout). The rollouts it shows and the store it exports hold the model calls with
 * their tool calls, the tool calls with their results (the agent's `tool.calculator` spans, which in a
 * page need the rollout's context handed down explicitly) and each result in the next call's prompt; the
 * held-out accuracy is shown; the adapter it hands out gives the tab's logits in Node on the base model.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CALC_X_FILES, calcXTabAgent } from "../../examples/tab/agents.ts";
import { CALC_X_MODEL } from "../../examples/tab/build.ts";
import { probeLogits, type RolloutView } from "../../examples/tab/loop.ts";
import { evaluate } from "../../examples/calc-x/calculator.ts";
import { heldOutTasks } from "../../examples/calc-x/tasks.ts";
import { batchFromTokens, forward, PAD_ID } from "../../src/model/index.ts";
import { launchChromium, noChromium } from "./chromium.ts";
import { downloadOf, driveTab, type StaticTab, serveStaticTab, type TabPageState } from "./tab-driver.ts";

/** 4 problems x 8 rollouts a step (so some group's rewards differ and the step trains), 8 held-out problems each step. */
const SETTINGS = {
  agent: "calc-x",
  steps: 2,
  batch: 4,
  n: 8,
  valTasks: 8,
  valEvery: 1,
  runners: 4,
  loraRank: 8,
  backend: "webgpu",
} as const;

const maxAbsDiff = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  expect(a.length).toBe(b.length);
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i]! - b[i]!));
  return d;
};

interface ExportedSpan {
  name: string;
  attributes: Record<string, unknown>;
}

describe.skipIf(noChromium)("examples/tab training the Calc-X tool agent", { timeout: 600_000 }, () => {
  let browser: Browser;
  let tab: StaticTab;
  let state: TabPageState;
  let page: Awaited<ReturnType<typeof driveTab>>["page"];

  beforeAll(async () => {
    [browser, tab] = await Promise.all([launchChromium(), serveStaticTab()]);
    const run = await driveTab(browser, tab, { settings: SETTINGS, timeoutMs: 540_000 });
    ({ page, state } = run);
    console.log(
      `[tab calc-x] ${state.steps.length} steps in ${run.seconds.toFixed(0)} s on ${state.backend}; rows trained per step ${state.steps.map((s) => `${s.trainedRows}/${s.rows}`).join(" ")}; held-out ${state.validations.map((v) => `${v.step}:${(v.accuracy * 100).toFixed(0)}%`).join(" ")}`,
    );
  }, 600_000);
  afterAll(async () => {
    await browser?.close();
    await tab?.close();
  });

  it("trains LoRA-GRPO on the tab's WebGPU device, one training row per rollout, and shows held-out accuracy", async () => {
    expect(state.error).toBeNull();
    expect(state.done).toBe(true);
    expect(state.backend).toMatch(/^webgpu \(google swiftshader\)/);
    expect(await page.textContent("#download")).toBe("Download LoRA adapter (step 2)");
    expect(state.steps.map((s) => s.step)).toEqual([1, 2]);
    // trajectory level: each rollout's chain of calls is one row (a rollout of 2-3 calls would give 2-3 rows a call each)
    for (const s of state.steps) expect(s.rows).toBe(SETTINGS.batch * SETTINGS.n);
    expect(state.steps.some((s) => s.trainedRows > 0)).toBe(true);
    expect(state.validations.map((v) => v.step)).toEqual([0, 1, 2]);
    expect(await page.textContent("#accuracy")).toMatch(/held-out accuracy: [\d.]+ % at step 0 → [\d.]+ % at step 2/);
  });

  it("shows rollouts with their model calls, tool calls and the calculator's results", async () => {
    const rollouts: RolloutView[] = state.rollouts;
    expect(rollouts.length).toBeGreaterThan(0);
    expect(await page.locator("#rollouts tr").count()).toBe(rollouts.reduce((n, r) => n + r.calls.length, 0));
    const withTools = rollouts.filter((r) => r.tools.length > 0);
    expect(withTools.length).toBeGreaterThan(0);
    for (const r of withTools) {
      // each tool call the model made ran in the tab's calculator, whose exact result went back to the model
      const asked = r.calls.flatMap((c) => c.toolCalls);
      expect(asked.length).toBeGreaterThanOrEqual(r.tools.length);
      for (const [i, t] of r.tools.entries()) {
        expect(t.name).toBe("calculator");
        expect(t.output).toBe(evaluate(String(t.input.expression)));
        expect(JSON.parse(asked[i]!.arguments)).toEqual(t.input);
        expect(r.calls[i + 1]!.prompt).toBe(t.output);
      }
    }
  });

  it("records every call, tool call and result in the store it exports", async () => {
    const data = JSON.parse(new TextDecoder().decode(await downloadOf(page, "#export"))) as {
      rollouts: { mode: string | null; status: string; spans: ExportedSpan[] }[];
    };
    const train = data.rollouts.filter((r) => r.mode === "train");
    expect(train.length).toBe(SETTINGS.steps * SETTINGS.batch * SETTINGS.n);
    expect(train.every((r) => r.status === "succeeded")).toBe(true);
    let toolSpans = 0;
    for (const r of train) {
      const calls = r.spans.filter((s) => s.name === "litellm_request");
      const tools = r.spans.filter((s) => String(s.attributes["agentlightning.operation.name"] ?? "").startsWith("tool."));
      const note = r.spans.find((s) => s.attributes["calc_x.turns"] !== undefined);
      // the agent's own annotation, emitted after its awaits: in the rollout's context all the same
      expect(note?.attributes["calc_x.turns"]).toBe(calls.length);
      expect(note?.attributes["calc_x.parsed_tool_calls"]).toBe(tools.length);
      for (const c of calls) expect((c.attributes.response_token_ids as number[]).length).toBeGreaterThan(0);
      for (const t of tools)
        expect(t.attributes["agentlightning.operation.output"]).toBe(
          evaluate(String(t.attributes["agentlightning.operation.input.expression"])),
        );
      toolSpans += tools.length;
    }
    expect(toolSpans).toBeGreaterThan(train.length / 2);
  });

  it("hands out the LoRA adapter as PEFT files that give the tab's logits in Node on the base model", async () => {
    const files = {
      "adapter_config.json": await downloadOf(page, "#download-config"),
      "adapter_model.safetensors": await downloadOf(page, "#download"),
    };
    const agent = await calcXTabAgent(
      Object.fromEntries(CALC_X_FILES.map((f) => [f, new Uint8Array(readFileSync(join(CALC_X_MODEL, f)))])),
    );
    // the probe: the first held-out problem as the agent's first call prompts it, tokenized alike in the tab and in Node
    const ids = agent.firstPrompt(heldOutTasks(1)[0]!, agent.model.tokenizer!);
    expect(state.probe!.ids).toEqual(ids);
    const inNode = await probeLogits(files, agent.model, ids);
    expect(maxAbsDiff(inNode, state.probe!.logits)).toBeLessThanOrEqual(1e-5);
    // the steps that trained moved the policy away from the base model
    const input = batchFromTokens([{ prompt: ids.slice(0, -1), response: ids.slice(-1) }], { padId: PAD_ID });
    expect(maxAbsDiff(inNode, forward(agent.model.config, agent.model.params, input).logits)).toBeGreaterThan(1e-4);
  });
});
