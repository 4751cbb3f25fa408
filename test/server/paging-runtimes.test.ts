/**
 * List pages from a real server process under Node, Deno and Bun: `--max-page-size` caps a page and says
 * so, a page larger than one stream chunk arrives whole, and the client pages through to every rollout.
 */
import { describe, expect, it } from "vitest";
import { LightningStoreClient } from "../../src/client/index.ts";
import { startServerProcess } from "./processes.ts";
import { RUNTIMES } from "../runtimes.ts";

describe.each(RUNTIMES)("list pages under %s", (runtime) => {
  it("--max-page-size caps a streamed page, and the client reads every page", async () => {
    const server = await startServerProcess(runtime, [
      "--port",
      "0",
      "--db",
      "memory",
      "--log-level",
      "warning",
      "--max-page-size",
      "2500",
    ]);
    try {
      const client = new LightningStoreClient(server.url);
      await client.enqueueManyRollouts(Array.from({ length: 3_000 }, (_, i) => ({ input: { i, text: "x".repeat(300) } })));
      const raw = await (await fetch(`${server.url}/v1/agl/rollouts?limit=-1`)).text();
      // About 1 MB: several stream chunks.
      expect(raw.length).toBeGreaterThan(1_000_000);
      const page = JSON.parse(raw) as { items: unknown[]; limit: number; offset: number; total: number; truncated_by: string };
      expect([page.items.length, page.limit, page.offset, page.total, page.truncated_by]).toEqual([
        2_500,
        2_500,
        0,
        3_000,
        "max_page_size",
      ]);
      const all = await client.queryRollouts();
      expect(all.items.map((r) => (r.input as { i: number }).i)).toEqual(Array.from({ length: 3_000 }, (_, i) => i));
      expect([all.limit, all.total]).toEqual([-1, 3_000]);
    } finally {
      expect(await server.stop("SIGTERM")).toBe(0);
    }
  }, 90_000);
});
