import { InMemoryLightningStore } from "../../src/store/index.ts";
import type { LitAgent } from "../../src/runner/index.ts";
import { Hook, LitAgentRunner } from "../../src/runner/index.ts";
import type { NamedResourcesInput } from "../../src/types/index.ts";

export const PROMPT: NamedResourcesInput = { prompt: { resource_type: "prompt_template", template: "Q: {q}", engine: "f-string" } };

export async function storeWithResources(resources: NamedResourcesInput = PROMPT) {
  const store = new InMemoryLightningStore({ scanDebounceSeconds: 0 });
  await store.addResources(resources);
  return store;
}

/** Runs `agent` over every queued rollout with one runner (no heartbeats, fast polls). */
export async function drain<T>(store: InMemoryLightningStore, agent: LitAgent<T>, maxRollouts: number, hooks: Hook[] = []) {
  const runner = new LitAgentRunner<T>({ maxRollouts, pollInterval: 0.01, intervalJitter: 0, heartbeatInterval: 0 });
  await runner.withRunContext({ agent, store, hooks, workerId: 0 }, (r) => r.iter());
  return runner;
}

/** Records every hook call as "name:rolloutId". */
export class RecordingHook extends Hook {
  constructor(
    readonly tag = "",
    readonly calls: string[] = [],
  ) {
    super();
  }
  override async onRolloutStart() {
    this.calls.push(`${this.tag}rollout_start`);
  }
  override async onTraceStart() {
    this.calls.push(`${this.tag}trace_start`);
  }
  override async onTraceEnd() {
    this.calls.push(`${this.tag}trace_end`);
  }
  override async onRolloutEnd(a: { spans: unknown[] }) {
    this.calls.push(`${this.tag}rollout_end(${a.spans.length})`);
  }
}
