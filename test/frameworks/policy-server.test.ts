/**
 * Each framework agent trained unchanged: a one-step `agl train` run per agent module (the committed
 * Calc-X model behind the real policy server, the runners, the libSQL store, GRPO on the CPU trainer),
 * with the plain `openai` agent (examples/calc-x/agent.ts) as the reference. From each run's store: one
 * triplet per model call with its token ids and the reward on the last, from either adapter, although
 * the AI SDK's own spans of the same calls are in the trace too; the rows per rollout at the transition
 * and trajectory levels; and the GRPO step that trained on them. The AI SDK and LangGraph send what the
 * plain agent sends, so under the same seeds their model calls are the plain agent's token for token.
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { trainTasks } from "../../examples/calc-x/tasks.ts";
import {
  buildTrainingBatch,
  type FinishedRollout,
  LlmProxyTraceToTriplet,
  TraceTripletAdapter,
  type Triplet,
} from "../../src/adapter/index.ts";
import { findFinalReward } from "../../src/adapter/reward.ts";
import { runCli } from "../../src/cli/agl.ts";
import { SAMPLING_SEED_KEY } from "../../src/proxy/sampling-seed.ts";
import { LLM_CALL_SPAN_NAME } from "../../src/proxy/llm-span.ts";
import { openStore } from "../../src/store/index.ts";
import type { Span } from "../../src/types/index.ts";
import { FRAMEWORKS } from "./frameworks.ts";

const BATCH = 4;
const GROUP = 4;
// the prompt with the tools is 103 tokens (117 with the Agents SDK's `strict` key); 256 positions in all
const MAX_PROMPT = 128;
const MAX_RESPONSE = 128;

interface Rollout {
  id: string;
  seed: number;
  spans: Span[];
  /** The policy server's record of each model call. */
  calls: Span[];
  triplets: Triplet[];
}

interface Run {
  code: number;
  rollouts: Rollout[];
  finished: FinishedRollout[];
  step: { rows: number; trained_rows: number; updates: number; grad_norm: number; reward: number };
}

let dir: string;
const runs = new Map<string, Run>();

/** One GRPO step of `agl train` with the agent module, and what it left in its store. */
async function train(agent: string): Promise<Run> {
  const out = join(dir, agent.replaceAll("/", "_"));
  const flags =
    `--model examples/calc-x/model --agent ${agent} --data ${join(dir, "tasks.jsonl")} --out ${out} --trace-aggregator-level trajectory ` +
    `--lora-r 4 --lora-alpha 8 --steps 1 --batch ${BATCH} --group ${GROUP} --temperature 1 --max-prompt ${MAX_PROMPT} ` +
    `--max-response ${MAX_RESPONSE} --runners 4 --seed 2 --no-progress`;
  const code = await runCli(["train", ...flags.split(" ")]);
  const store = await openStore(`file:${join(out, "store.db")}`);
  try {
    const rollouts: Rollout[] = [];
    const finished: FinishedRollout[] = [];
    for (const r of (await store.queryRollouts({ mode_in: ["train"], limit: -1 })).items) {
      const spans = (await store.querySpans(r.rollout_id, { attempt_id: "latest" })).items;
      const triplets = new LlmProxyTraceToTriplet().adapt(spans);
      const calls = spans.filter((s) => s.name === LLM_CALL_SPAN_NAME).sort((a, b) => a.sequence_id - b.sequence_id);
      rollouts.push({ id: r.rollout_id, seed: Number(r.metadata?.[SAMPLING_SEED_KEY]), spans, calls, triplets });
      finished.push({ rollout_id: r.rollout_id, data_id: String(r.metadata?.data_id), triplets });
    }
    const reports = (await readFile(join(out, "metrics.jsonl"), "utf8"))
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    return { code, rollouts, finished, step: reports.find((x) => x.kind === "step") };
  } finally {
    await store.close();
  }
}

const startsWith = (xs: number[], prefix: number[]) => prefix.length <= xs.length && prefix.every((x, i) => xs[i] === x);
const ids = (t: Triplet) => ({ prompt: t.prompt.token_ids as number[], response: t.response.token_ids as number[] });

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "frameworks-train-"));
  // one-call problems: the committed model solves some of each group, so the step has rows to train on
  const tasks = trainTasks(60, 3)
    .filter((t) => t.calls === 1)
    .slice(0, 12);
  await writeFile(join(dir, "tasks.jsonl"), tasks.map((t) => `${JSON.stringify(t)}\n`).join(""));
  for (const agent of ["examples/calc-x/agent.ts", ...FRAMEWORKS.map((f) => f.module)]) runs.set(agent, await train(agent));
}, 600_000);
afterAll(() => rm(dir, { recursive: true, force: true }));

describe.each(FRAMEWORKS)("$name trained by agl train against the policy server", (fw) => {
  it("one triplet per model call with its token ids from either adapter, the reward on the last; the framework's own spans not counted", () => {
    const run = runs.get(fw.module)!;
    expect(run.code).toBe(0);
    expect(run.rollouts).toHaveLength(BATCH * GROUP);
    for (const r of run.rollouts) {
      const k = r.calls.length;
      expect(k).toBeGreaterThanOrEqual(1);
      expect(k).toBeLessThanOrEqual(4);
      expect(r.triplets.map(ids)).toEqual(
        r.calls.map((s) => ({ prompt: s.attributes.prompt_token_ids, response: s.attributes.response_token_ids })),
      );
      for (const t of r.triplets) {
        expect(ids(t).prompt.length).toBeGreaterThan(0);
        expect(ids(t).response.length).toBeGreaterThan(0);
      }
      const reward = findFinalReward(r.spans);
      expect([0, 1]).toContain(reward);
      expect(r.triplets.map((t) => t.reward)).toEqual([...Array(k - 1).fill(null), reward]);
      // the tracer's adapter reads the same calls, and nothing else, from the whole trace
      expect(new TraceTripletAdapter().adapt(r.spans).map(ids)).toEqual(r.triplets.map(ids));
      if (fw.module.endsWith("ai-sdk.ts")) {
        // the SDK's spans of the same calls are there: one doGenerate per call, under its generateText span
        expect(r.spans.filter((s) => s.name === "ai.generateText.doGenerate")).toHaveLength(k);
        expect(r.spans.filter((s) => s.name === "ai.generateText")).toHaveLength(1);
      }
    }
  });

  it("rows per rollout: one per model call at the transition level, one per unbroken chain of calls at the trajectory level; a GRPO step trained on them", () => {
    const run = runs.get(fw.module)!;
    const options = { maxPromptLength: MAX_PROMPT, maxResponseLength: MAX_RESPONSE };
    const transition = buildTrainingBatch(run.finished, { level: "transition", ...options });
    const trajectory = buildTrainingBatch(run.finished, { level: "trajectory", ...options });
    const rowsOf = (rolloutIds: string[], id: string) => rolloutIds.filter((x) => x === id).length;
    for (const r of run.rollouts) {
      expect(rowsOf(transition.rolloutIds, r.id)).toBe(r.calls.length);
      // a call whose prompt does not extend the previous call's prompt and response starts a new row
      const breaks = r.triplets.slice(1).filter((t, i) => {
        const before = ids(r.triplets[i]!);
        return !startsWith(ids(t).prompt, [...before.prompt, ...before.response]);
      }).length;
      expect(rowsOf(trajectory.rolloutIds, r.id)).toBe(1 + breaks);
    }
    // the step trained on the trajectory rows: some groups had rewards to tell apart
    expect(run.step.rows).toBe(trajectory.tensors.n);
    expect(run.step.trained_rows).toBeGreaterThan(0);
    expect(run.step.updates).toBeGreaterThan(0);
    expect(run.step.grad_norm).toBeGreaterThan(0);
  });
});

describe("what the frameworks send the policy", () => {
  it("the AI SDK's and LangGraph's model calls are the plain openai agent's, token for token, under the same seeds", () => {
    const bySeed = (run: Run) => new Map(run.rollouts.map((r) => [r.seed, r.triplets.map(ids)]));
    const plain = bySeed(runs.get("examples/calc-x/agent.ts")!);
    for (const f of FRAMEWORKS.filter((x) => !x.module.endsWith("openai-agents.ts"))) expect(bySeed(runs.get(f.module)!)).toEqual(plain);
  });
});
