/** InProcessPolicyServer: the policy app through app.fetch, its origin, its lifecycle and its token. */
import { describe, expect, it } from "vitest";
import { initParams, presetConfig } from "../../src/model/index.ts";
import { InProcessPolicyServer, ModelPolicy } from "../../src/proxy/index.ts";
import { ValidationError } from "../../src/types/index.ts";

const config = { ...presetConfig("tiny"), d_model: 32, n_layers: 1, n_heads: 2, n_kv_heads: 1, d_ff: 64, max_seq_len: 32 };
const policy = () => new ModelPolicy({ model: "m", config, params: initParams(config, 0) });

describe("InProcessPolicyServer", () => {
  it("answers requests to its origin with the policy app, a 503 while stopped, and refuses a bad origin", async () => {
    const server = new InProcessPolicyServer({ policy: policy() });
    expect(server.endpoint).toBe("http://policy-server.invalid/v1");
    const models = () => server.fetch(`${server.endpoint}/models`);
    expect((await models()).status).toBe(503);
    await server.start();
    expect(server.isRunning()).toBe(true);
    const body = (await (await models()).json()) as { data: { id: string }[] };
    expect(body.data.map((m) => m.id)).toEqual(["m"]);
    await server.stop();
    expect((await models()).status).toBe(503);
    expect(() => new InProcessPolicyServer({ policy: policy(), origin: "http://x/v1" })).toThrow(ValidationError);
    expect(() => new InProcessPolicyServer({ policy: policy(), origin: "not a url" })).toThrow(/not a URL/);
  });

  it("asks for its token as agl serve does, and is a ProxyLLM resource the runner binds to its attempt", async () => {
    const server = new InProcessPolicyServer({ policy: policy(), token: "t0k", origin: "http://policy.test" });
    await server.start();
    expect((await server.fetch("http://policy.test/v1/models")).status).toBe(401);
    expect((await server.fetch("http://policy.test/v1/models", { headers: { authorization: "Bearer t0k" } })).status).toBe(200);
    expect(server.asResource()).toMatchObject({ resource_type: "proxy_llm", endpoint: "http://policy.test/v1", model: "m" });
    expect(server.asResource({ rolloutId: "ro-1", attemptId: "at-1" })).toMatchObject({
      resource_type: "llm",
      endpoint: "http://policy.test/rollout/ro-1/attempt/at-1/v1",
    });
  });
});
