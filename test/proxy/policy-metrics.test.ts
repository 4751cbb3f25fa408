/** The policy server's `GET /metrics` (src/proxy/policy-metrics.ts): requests, latency, tokens, version, then the process's registry. */
import { describe, expect, it } from "vitest";
import { initParams, presetConfig } from "../../src/model/index.ts";
import { processMetrics } from "../../src/metrics/registry.ts";
import { createPolicyApp, ModelPolicy } from "../../src/proxy/index.ts";
import { parsePrometheusText, sampleValue } from "../metrics/prometheus-text.ts";

const config = { ...presetConfig("tiny"), max_seq_len: 64 };
const params = initParams(config, 3);

/** A sample's value in the Prometheus text, read by the strict reader (undefined when absent). */
const sample = (text: string, name: string, labels: Record<string, string> = {}): number | undefined =>
  sampleValue(parsePrometheusText(text), name, labels);

const post = (app: ReturnType<typeof createPolicyApp>, path: string, body: unknown, headers: Record<string, string> = {}) =>
  app.request(path, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });

describe("the policy server's /metrics", () => {
  it("counts requests by endpoint and status, their latency, prompt and generated tokens, and serves the policy version", async () => {
    const policy = new ModelPolicy({ model: "tiny", config, params, seed: 1 });
    const app = createPolicyApp({ policy });
    const usages: { prompt_tokens: number; completion_tokens: number }[] = [];
    for (const body of [
      { model: "tiny", messages: [{ role: "user", content: "2+3=" }], max_tokens: 5 },
      { model: "tiny", messages: [{ role: "user", content: "hello there" }], max_tokens: 4, n: 2 },
    ]) {
      const res = await post(app, "/v1/chat/completions", body);
      expect(res.status).toBe(200);
      usages.push(((await res.json()) as { usage: (typeof usages)[number] }).usage);
    }
    const done = await post(app, "/rollout/ro-1/attempt/at-1/v1/completions", { model: "tiny", prompt: "abc", max_tokens: 3 });
    expect(done.status).toBe(200);
    const completionUsage = ((await done.json()) as { usage: (typeof usages)[number] }).usage;
    expect((await post(app, "/v1/chat/completions", { model: "tiny", messages: "not a list" })).status).toBe(400);

    const text = await (await app.request("/metrics")).text();
    expect(sample(text, "agl_policy_requests_total", { endpoint: "chat", status: "200" })).toBe(2);
    expect(sample(text, "agl_policy_requests_total", { endpoint: "chat", status: "400" })).toBe(1);
    expect(sample(text, "agl_policy_requests_total", { endpoint: "completions", status: "200" })).toBe(1);
    expect(sample(text, "agl_policy_latency_count", { endpoint: "chat", status: "200" })).toBe(2);
    expect(sample(text, "agl_policy_latency_count", { endpoint: "chat", status: "400" })).toBe(1);
    expect(sample(text, "agl_policy_prompt_tokens_total", { endpoint: "chat" })).toBe(usages[0].prompt_tokens + usages[1].prompt_tokens);
    expect(sample(text, "agl_policy_generation_tokens_total", { endpoint: "chat" })).toBe(
      usages[0].completion_tokens + usages[1].completion_tokens,
    );
    expect(sample(text, "agl_policy_prompt_tokens_total", { endpoint: "completions" })).toBe(completionUsage.prompt_tokens);
    expect(sample(text, "agl_policy_generation_tokens_total", { endpoint: "completions" })).toBe(completionUsage.completion_tokens);
    expect(sample(text, "agl_policy_requests_running")).toBe(0);
    expect(sample(text, "agl_policy_version")).toBe(policy.version);
    expect(text).toContain("# TYPE agl_policy_latency histogram");
  });

  it("counts a request as running while it is answered", async () => {
    let release: () => void = () => {};
    const gate = new Promise<void>((r) => (release = r));
    const policy = new ModelPolicy({ model: "tiny", config, params, seed: 1 });
    const generate = policy.generate.bind(policy);
    policy.generate = async (...args) => {
      await gate;
      return generate(...args);
    };
    const app = createPolicyApp({ policy });
    const pending = post(app, "/v1/chat/completions", { model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    await new Promise((r) => setTimeout(r, 20));
    expect(sample(await (await app.request("/metrics")).text(), "agl_policy_requests_running")).toBe(1);
    release();
    expect((await pending).status).toBe(200);
    expect(sample(await (await app.request("/metrics")).text(), "agl_policy_requests_running")).toBe(0);
  });

  it("serves the process's registry after its own series (what algorithms in the process write)", async () => {
    processMetrics.registerGauge("policy_metrics_test_gauge", ["run"]);
    processMetrics.setGauge("policy_metrics_test_gauge", 7, { run: "r1" });
    const app = createPolicyApp({ policy: new ModelPolicy({ model: "tiny", config, params }) });
    const text = await (await app.request("/metrics")).text();
    expect(sample(text, "policy_metrics_test_gauge", { run: "r1" })).toBe(7);
    expect(text.indexOf("agl_policy_requests_running")).toBeLessThan(text.indexOf("policy_metrics_test_gauge"));
  });

  it("is behind the token like every route but /health, and absent with metrics: false", async () => {
    const policy = new ModelPolicy({ model: "tiny", config, params });
    const guarded = createPolicyApp({ policy, token: "s3cret" });
    expect((await guarded.request("/metrics")).status).toBe(401);
    expect((await guarded.request("/metrics", { headers: { authorization: "Bearer s3cret" } })).status).toBe(200);
    expect((await createPolicyApp({ policy, metrics: false }).request("/metrics")).status).toBe(404);
  });
});
