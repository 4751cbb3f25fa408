/**
 * `Idempotency-Key` on a real `agl store` process under Node, Deno and Bun: a repeat is replayed, two
 * concurrent copies write once, another body is a 422, and the `--idempotency-keys` flag reaches the server.
 */
import { afterEach, describe, expect, it } from "vitest";
import { RUNTIMES, startServerProcess, type ServerProcess } from "./processes.ts";

let server: ServerProcess | null = null;
afterEach(async () => {
  await server?.stop();
  server = null;
});

describe.each(RUNTIMES)("Idempotency-Key under %s", (runtime) => {
  it("replays repeats, writes concurrent copies once, refuses another body, honours --idempotency-keys", async () => {
    server = await startServerProcess(runtime, ["--port", "0", "--db", "memory", "--idempotency-keys", "2"]);
    const url = server.url;
    const enqueue = (key: string, input: unknown = 1) =>
      fetch(`${url}/v1/agl/queues/rollouts/enqueue`, {
        method: "POST",
        headers: { "content-type": "application/json", "idempotency-key": `"${key}"` },
        body: JSON.stringify({ rollouts: [{ input }] }),
      });
    const total = async () => ((await (await fetch(`${url}/v1/agl/statistics`)).json()) as { total_rollouts: number }).total_rollouts;

    const [a, b] = await Promise.all([enqueue("k1"), enqueue("k1")]);
    const again = await enqueue("k1");
    const bodies = await Promise.all([a, b, again].map((r) => r.json()));
    expect(bodies[1]).toEqual(bodies[0]);
    expect(bodies[2]).toEqual(bodies[0]);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect((await enqueue("k1", 2)).status).toBe(422);
    expect(await total()).toBe(1);

    // Two keys are kept: a third evicts the least recently used (k1), whose repeat then runs again.
    await enqueue("k2");
    await enqueue("k3");
    expect((await enqueue("k1")).headers.get("idempotent-replayed")).toBeNull();
    expect(await total()).toBe(4);
  });
});
