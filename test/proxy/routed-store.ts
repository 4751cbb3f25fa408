/** What tests of the policy server and the LLM proxy share: a tiny random policy, and an attempt to route calls to. */
import { initParams, presetConfig } from "../../src/model/index.ts";
import { ModelPolicy } from "../../src/proxy/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";

/** The policy of a tiny random model named `tiny-policy` (64 positions). */
export function tinyPolicy(): ModelPolicy {
  const config = { ...presetConfig("tiny"), max_seq_len: 64 };
  return new ModelPolicy({ model: "tiny-policy", config, params: initParams(config, 3), seed: 11 });
}

/** A store with one rollout's attempt: the routing prefix of its calls, and how many spans were recorded for it. */
export async function routedStore() {
  const store = new InMemoryLightningStore();
  const { rollout_id, attempt } = await store.startRollout({ q: 1 });
  return {
    store,
    prefix: `/rollout/${rollout_id}/attempt/${attempt.attempt_id}`,
    spans: async () => (await store.querySpans(rollout_id)).items.length,
  };
}
