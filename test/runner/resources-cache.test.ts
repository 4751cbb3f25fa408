/** The runner's resources cache: one fetch per resources id, never older than the rollout it serves. */
import { describe, expect, it } from "vitest";
import { LitAgent, LitAgentRunner } from "../../src/runner/index.ts";
import { InMemoryLightningStore } from "../../src/store/index.ts";
import type { AttemptedRollout, NamedResources } from "../../src/types/index.ts";
import { ManualClock } from "../../src/types/index.ts";
import { PROMPT } from "./helpers.ts";

/** Counts the resources reads a runner makes. */
class CountingStore extends InMemoryLightningStore {
  byId = 0;
  latest = 0;
  override async getResourcesById(id: string) {
    this.byId++;
    return super.getResourcesById(id);
  }
  override async getLatestResources() {
    this.latest++;
    return super.getLatestResources();
  }
}

/** Records the template each rollout saw, and tries to edit its resources. */
class Recorder extends LitAgent<number> {
  seen: string[] = [];
  constructor(private readonly clock: ManualClock) {
    super();
  }
  override async rollout(_task: number, resources: NamedResources, _rollout: AttemptedRollout) {
    const p = resources.prompt as { template: string };
    this.seen.push(p.template);
    expect(() => (p.template = "edited by the agent")).toThrow(TypeError);
    this.clock.advance(1);
  }
}

function setup() {
  const clock = new ManualClock(1000);
  const store = new CountingStore({ clock, scanDebounceSeconds: 0 });
  return { clock, store, agent: new Recorder(clock) };
}

const runnerOf = (maxRollouts: number | null = null) =>
  new LitAgentRunner<number>({ maxRollouts, pollInterval: 0.01, intervalJitter: 0, heartbeatInterval: 0 });

describe("resources cache", () => {
  it("fetches a resources id once for rollouts created before the first fetch, which the agent cannot edit", async () => {
    const { clock, store, agent } = setup();
    await store.addResources(PROMPT);
    clock.advance(1);
    for (let i = 0; i < 3; i++) await store.enqueueRollout(i);
    clock.advance(1);
    await runnerOf(3).withRunContext({ agent, store, workerId: 0 }, (r) => r.iter());
    expect(store.byId).toBe(1);
    expect(agent.seen).toEqual(["Q: {q}", "Q: {q}", "Q: {q}"]);
    expect((await store.queryRollouts({ status_in: ["succeeded"] })).items).toHaveLength(3);
  });

  it("fetches again for a rollout created after the cached fetch, so an in-place update is seen", async () => {
    const { clock, store, agent } = setup();
    const rs = await store.addResources(PROMPT);
    clock.advance(1);
    await store.enqueueRollout(0);
    clock.advance(1);
    await runnerOf(1).withRunContext({ agent, store, workerId: 0 }, async (r) => {
      await r.iter();
      // The algorithm replaces the same id's content, then enqueues the next batch.
      clock.advance(1);
      await store.updateResources(rs.resources_id, {
        prompt: { resource_type: "prompt_template", template: "v2 {q}", engine: "f-string" },
      });
      await store.enqueueRollout(1, { resources_id: rs.resources_id });
      clock.advance(1);
      await r.iter();
    });
    expect(store.byId).toBe(2);
    expect(agent.seen).toEqual(["Q: {q}", "v2 {q}"]);
  });

  it("the same runner refetches when a rollout is not older than its cached copy", async () => {
    const { clock, store, agent } = setup();
    const rs = await store.addResources(PROMPT);
    clock.advance(1);
    await store.enqueueRollout(0);
    clock.advance(1);
    await runnerOf().withRunContext({ agent, store, workerId: 0 }, async (r) => {
      await r.step(0);
      expect(store.byId).toBe(1);
      // Created after the cached fetch (and after an in-place update): fetched again.
      await store.updateResources(rs.resources_id, {
        prompt: { resource_type: "prompt_template", template: "v2 {q}", engine: "f-string" },
      });
      clock.advance(1);
      await r.step(1);
      expect(store.byId).toBe(2);
    });
    expect(agent.seen).toEqual(["Q: {q}", "v2 {q}"]);
  });

  it("a rollout without a resources id always asks for the latest", async () => {
    const { clock, store, agent } = setup();
    await store.enqueueRollout(0);
    await store.enqueueRollout(1);
    await store.addResources(PROMPT);
    clock.advance(1);
    await runnerOf(2).withRunContext({ agent, store, workerId: 0 }, (r) => r.iter());
    expect(store.latest).toBe(2);
    expect(store.byId).toBe(0);
    expect(agent.seen).toEqual(["Q: {q}", "Q: {q}"]);
  });
});
