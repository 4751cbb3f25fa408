/**
 * The LLM proxies a test file starts in front of its scripted upstreams, all recording into one store:
 * `startProxy` starts one from the file's settings (`settings()`, read at each start, once the upstreams'
 * URLs are known) with the test's own options on top, `attempt` starts a rollout to record calls under,
 * `spansOf` reads a rollout's spans, and `reset` (after each test) stops the proxies and clears the
 * upstreams' records and scripts.
 */
import { LLMProxy, type LLMProxyOptions } from "../../src/proxy/index.ts";
import type { InMemoryLightningStore } from "../../src/store/memory.ts";
import type { Span } from "../../src/types/span.ts";
import type { ScriptedUpstream } from "./scripted-upstream.ts";

export function proxyHarness(store: InMemoryLightningStore, upstreams: () => ScriptedUpstream[], settings: () => LLMProxyOptions) {
  const proxies: LLMProxy[] = [];
  return {
    async startProxy(options: Partial<LLMProxyOptions> = {}): Promise<LLMProxy> {
      const proxy = new LLMProxy({ ...settings(), store, ...options });
      proxies.push(proxy);
      await proxy.start();
      return proxy;
    },
    async attempt(): Promise<{ rid: string; aid: string }> {
      const r = await store.startRollout({ q: 1 });
      return { rid: r.rollout_id, aid: r.attempt.attempt_id };
    },
    spansOf: async (rid: string): Promise<Span[]> => (await store.querySpans(rid)).items,
    async reset(): Promise<void> {
      await Promise.all(proxies.splice(0).map((p) => p.stop()));
      for (const u of upstreams()) {
        u.received.length = 0;
        u.script.length = 0;
      }
    },
  };
}
