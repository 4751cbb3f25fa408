/**
 * Six rollouts traced by three runners running concurrently in one process, each rollout's spans read
 * back from the store. Shared by test/tracer/cross-runtime.ts (Node, Deno, Bun: the agent relies on the
 * runtime's async context) and test/browser/loop-scenarios.ts (Node and a Chromium page: the agent passes
 * its context explicitly). Imports nothing runtime-specific, so it bundles for a page.
 */
import type { ExpectStatic } from "vitest";
import { LitAgentRunner } from "../../src/runner/index.ts";
import type { LitAgent } from "../../src/runner/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";

export interface TracedRollout {
  names: string[];
  consecutive: boolean;
  reward: unknown;
  status: string;
}

export const TRACED_TASK_IDS = [1, 2, 3, 4, 5, 6];

/** Runs the six tasks `{ id }` through three runners, one `agents[w]` each, and reports each rollout in task order. */
export async function traceSixRollouts(agents: readonly LitAgent<{ id: number }>[]): Promise<TracedRollout[]> {
  const store = new InMemoryLightningStore();
  await store.addResources({ p: { resource_type: "prompt_template", template: "x", engine: "f-string" } });
  const rollouts = await Promise.all(TRACED_TASK_IDS.map((id) => store.enqueueRollout({ id })));
  // the runners share the tracing machinery of one process; each must only see its own spans
  await Promise.all(
    agents.map(async (agent, w) => {
      const runner = new LitAgentRunner<{ id: number }>({ maxRollouts: 2, pollInterval: 0.01, heartbeatInterval: 0 });
      await runner.withRunContext({ agent, store, workerId: w }, (r) => r.iter());
    }),
  );
  const report: TracedRollout[] = [];
  for (const r of rollouts) {
    const spans = (await store.querySpans(r.rollout_id)).items;
    const seqs = spans.map((s) => s.sequence_id);
    report.push({
      names: spans.map((s) => s.name),
      consecutive: seqs.every((s, i) => s === seqs[0]! + i),
      reward: spans.at(-1)?.attributes["agentlightning.reward.0.value"],
      status: (await store.getRolloutById(r.rollout_id))!.status,
    });
  }
  await store.close();
  return report;
}

/** What each rollout must hold: task `id`'s nested spans `t<id>.<depth>` in start order, then its reward `id / 10`. */
export function expectTracedRollouts(expect: ExpectStatic, rollouts: readonly TracedRollout[]): void {
  expect(rollouts).toHaveLength(TRACED_TASK_IDS.length);
  rollouts.forEach((r, i) => {
    const id = TRACED_TASK_IDS[i]!;
    expect(r.status).toBe("succeeded");
    expect(r.names).toEqual([
      `t${id}.2`,
      `t${id}.1`,
      `t${id}.0`,
      `t${id}.0`,
      `t${id}.1`,
      `t${id}.0`,
      `t${id}.0`,
      "agentlightning.annotation",
    ]);
    expect(r.consecutive).toBe(true);
    expect(r.reward).toBeCloseTo(id / 10);
  });
}
