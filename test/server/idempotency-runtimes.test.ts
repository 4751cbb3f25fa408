/**
 * `Idempotency-Key` on a real `agl store` process under Node, Deno and Bun: a repeat is replayed, two
 * concurrent copies write once, another body is a 422, the `--idempotency-keys` flag reaches the server,
 * and a bad key is a 400 naming the header even when the body arrives slowly.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServerProcess, type ServerProcess } from "./processes.ts";
import { RUNTIMES } from "../runtimes.ts";
import { slowPost } from "./slow-post.ts";

describe.each(RUNTIMES)("Idempotency-Key under %s", (runtime) => {
  let server: ServerProcess;
  beforeAll(async () => {
    server = await startServerProcess(runtime, ["--port", "0", "--db", "memory", "--idempotency-keys", "2"]);
  });
  afterAll(() => server?.stop());
  const total = async () => ((await (await fetch(`${server.url}/v1/agl/statistics`)).json()) as { total_rollouts: number }).total_rollouts;

  it("replays repeats, writes concurrent copies once, refuses another body, honours --idempotency-keys", async () => {
    const url = server.url;
    const before = await total();
    const enqueue = (key: string, input: unknown = 1) =>
      fetch(`${url}/v1/agl/queues/rollouts/enqueue`, {
        method: "POST",
        headers: { "content-type": "application/json", "idempotency-key": `"${key}"` },
        body: JSON.stringify({ rollouts: [{ input }] }),
      });

    const [a, b] = await Promise.all([enqueue("k1"), enqueue("k1")]);
    const again = await enqueue("k1");
    const bodies = await Promise.all([a, b, again].map((r) => r.json()));
    expect(bodies[1]).toEqual(bodies[0]);
    expect(bodies[2]).toEqual(bodies[0]);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect((await enqueue("k1", 2)).status).toBe(422);
    expect(await total()).toBe(before + 1);

    // Two keys are kept: a third evicts the least recently used (k1), whose repeat then runs again.
    await enqueue("k2");
    await enqueue("k3");
    expect((await enqueue("k1")).headers.get("idempotent-replayed")).toBeNull();
    expect(await total()).toBe(before + 4);
  });

  it.each([
    ["1,000 characters", "k".repeat(1000), /at most 255 characters/],
    ["not ASCII", "cl\u00e9", /printable ASCII/],
  ])("a bad key (%s) with a body that takes a second to arrive: 400 naming the header, nothing written", async (_l, key, message) => {
    const before = await total();
    const body = JSON.stringify({ rollouts: [{ input: "x".repeat(200_000) }] });
    const answer = await slowPost(server.url, "/v1/agl/queues/rollouts/enqueue", { "idempotency-key": key }, body, 1_200);
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    const json = JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4)) as {
      error_type: string;
      issues: { path: string[]; message: string }[];
    };
    expect(json.error_type).toBe("ValidationError");
    expect(json.issues[0]!.path).toEqual(["idempotency-key"]);
    expect(json.issues[0]!.message).toMatch(message);
    expect(await total()).toBe(before);
  });
});
