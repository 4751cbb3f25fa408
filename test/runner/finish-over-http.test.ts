/**
 * The runner over HTTP finishes each attempt with one request (`POST /v1/agl/attempts/finish`): the
 * tracer's last spans, the final status and — while the runner goes on — the claim of its next rollout.
 * Final states and span numbering are the same as with separate calls; hooks still see stored spans.
 */
import { afterEach, describe, expect, it } from "vitest";
import { LightningStoreClient } from "../../src/client/index.ts";
import { Hook, LitAgent, LitAgentRunner } from "../../src/runner/index.ts";
import { InMemoryLightningStore } from "../../src/store/index.ts";
import { emitMessage, emitReward, getOtelTracer } from "../../src/tracer/index.ts";
import { startInProcess, type InProcessServer } from "../server/in-process.ts";
import { PROMPT } from "./helpers.ts";

let store: InMemoryLightningStore;
let server: InProcessServer;
afterEach(async () => {
  await server?.close();
  await store?.close();
});

/** Two traced spans (a parent and its child), a message and a reward; returns `result`. */
class Traced extends LitAgent<string> {
  constructor(private readonly result: unknown = undefined) {
    super();
  }
  override async rollout(task: string) {
    getOtelTracer("test").startActiveSpan(`work-${task}`, (s) => {
      emitMessage(`doing ${task}`);
      s.end();
    });
    emitReward(0.5);
    return this.result as never;
  }
}

/** Requests the client sent, by route (ids masked), and the JSON bodies of the finish requests. */
async function served(tasks: string[]) {
  store = new InMemoryLightningStore({ scanDebounceSeconds: 0 });
  await store.addResources(PROMPT);
  for (const t of tasks) await store.enqueueRollout(t);
  server = await startInProcess(store);
  const counts: Record<string, number> = {};
  const finishes: { claim?: unknown; spans?: unknown[] }[] = [];
  const client = new LightningStoreClient(server.url, {
    retryDelays: [],
    fetch: async (input, init) => {
      const url = new URL(String(input));
      const route = `${init?.method ?? "GET"} ${url.pathname.replace(/\/(ro|at|rs)-[0-9a-f]+/g, "/:id")}`;
      counts[route] = (counts[route] ?? 0) + 1;
      if (url.pathname.endsWith("/attempts/finish")) finishes.push(JSON.parse(String(init!.body)) as never);
      return fetch(input, init);
    },
  });
  return { client, counts, finishes };
}

const spansOf = async (rolloutId: string) => (await store.querySpans(rolloutId)).items.map((s) => [s.name, s.sequence_id]);

describe("runner over HTTP: one finishing request per attempt", () => {
  it("claims once, then each attempt's spans, status and next claim go in one request; the last one claims nothing", async () => {
    const { client, counts, finishes } = await served(["a", "b", "c", "d"]);
    const runner = new LitAgentRunner<string>({ maxRollouts: 3, pollInterval: 0.01, intervalJitter: 0, heartbeatInterval: 0 });
    await runner.withRunContext({ agent: new Traced(), store: client, workerId: 0 }, (r) => r.iter());
    expect(counts["POST /v1/agl/queues/rollouts/dequeue"]).toBe(1);
    expect(counts["POST /v1/agl/attempts/finish"]).toBe(3);
    expect(counts["POST /v1/agl/spans/batch"]).toBeUndefined();
    expect(counts["POST /v1/agl/rollouts/:id/attempts/:id"]).toBeUndefined();
    expect(finishes.map((f) => f.claim ?? null)).toEqual([{ worker_id: "Worker-0" }, { worker_id: "Worker-0" }, null]);
    expect(finishes.map((f) => f.spans?.length)).toEqual([3, 3, 3]);

    const all = (await store.queryRollouts({ sort_by: "start_time" })).items;
    expect(all.map((r) => r.status)).toEqual(["succeeded", "succeeded", "succeeded", "queuing"]);
    for (const r of all.slice(0, 3)) {
      // Start order: the parent, the message inside it, then the reward.
      expect(await spansOf(r.rollout_id)).toEqual([
        [`work-${r.input as string}`, 1],
        ["agentlightning.message", 2],
        ["agentlightning.annotation", 3],
      ]);
      expect((await store.getLatestAttempt(r.rollout_id))!.worker_id).toBe("Worker-0");
    }
    expect(runner.tracer.getLastTrace().map((s) => s.sequence_id)).toEqual([1, 2, 3]);
    await client.close();
  });

  it("with a hook, spans are stored before rollout_end sees them; the status and next claim still share a request", async () => {
    const { client, counts } = await served(["a", "b"]);
    const seen: number[] = [];
    class Count extends Hook {
      override async onRolloutEnd(a: { rollout: { rollout_id: string } }) {
        seen.push((await store.querySpans(a.rollout.rollout_id)).total);
      }
    }
    const runner = new LitAgentRunner<string>({ maxRollouts: 2, pollInterval: 0.01, intervalJitter: 0, heartbeatInterval: 0 });
    await runner.withRunContext({ agent: new Traced(), store: client, hooks: [new Count()], workerId: 0 }, (r) => r.iter());
    expect(seen).toEqual([3, 3]);
    expect(counts["POST /v1/agl/spans/batch"]).toBe(2);
    expect(counts["POST /v1/agl/attempts/finish"]).toBe(1);
    expect(counts["POST /v1/agl/rollouts/:id/attempts/:id"]).toBe(1);
    expect(counts["POST /v1/agl/queues/rollouts/dequeue"]).toBe(1);
    expect((await store.queryRollouts({ status_in: ["succeeded"] })).total).toBe(2);
    await client.close();
  });

  it("a returned reward is stored after the traced spans (they are sent first), numbered after them", async () => {
    const { client } = await served(["a"]);
    const runner = new LitAgentRunner<string>({ maxRollouts: 1, pollInterval: 0.01, intervalJitter: 0, heartbeatInterval: 0 });
    await runner.withRunContext({ agent: new Traced(0.9), store: client, workerId: 0 }, (r) => r.iter());
    const [r] = (await store.queryRollouts()).items;
    expect(r!.status).toBe("succeeded");
    expect((await spansOf(r!.rollout_id)).map(([, seq]) => seq)).toEqual([1, 2, 3, 4]);
    expect((await store.querySpans(r!.rollout_id)).items[3]!.attributes["agentlightning.reward.0.value"]).toBe(0.9);
    await client.close();
  });

  it("a failing agent: the attempt is failed in the finishing request and its spans are kept", async () => {
    const { client } = await served(["a"]);
    class Fails extends Traced {
      override async rollout(task: string): Promise<never> {
        await super.rollout(task);
        throw new Error("boom");
      }
    }
    const runner = new LitAgentRunner<string>({ maxRollouts: 1, pollInterval: 0.01, intervalJitter: 0, heartbeatInterval: 0 });
    await runner.withRunContext({ agent: new Fails(), store: client, workerId: 0 }, (r) => r.iter());
    const [r] = (await store.queryRollouts()).items;
    expect((await store.getLatestAttempt(r!.rollout_id))!.status).toBe("failed");
    expect(await spansOf(r!.rollout_id)).toHaveLength(3);
    await client.close();
  });
});
