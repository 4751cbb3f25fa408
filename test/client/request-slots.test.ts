/**
 * The client's cap on requests in flight (src/client/request-slots.ts): hundreds of calls at once never
 * hold more than `maxConcurrentRequests` requests open, all of them complete, and a call waiting for a
 * slot ends when its caller gives up or the client closes.
 */
import { describe, expect, it } from "vitest";
import { LightningStoreClient, StoreConnectionError } from "../../src/client/index.ts";
import { RequestSlots } from "../../src/client/request-slots.ts";

/** A fetch answering `/spans/next` after `delayMs`, counting how many calls it holds at once. */
function countingFetch(delayMs: number) {
  const seen = { now: 0, most: 0, calls: 0 };
  const fetchFn: typeof fetch = async (_input, init) => {
    seen.now++;
    seen.calls++;
    seen.most = Math.max(seen.most, seen.now);
    try {
      await new Promise<void>((resolve, reject) => {
        const t = setTimeout(resolve, delayMs);
        init?.signal?.addEventListener("abort", () => (clearTimeout(t), reject(init.signal!.reason)), { once: true });
      });
      return new Response(JSON.stringify({ sequence_id: seen.calls }), { status: 200, headers: { "content-type": "application/json" } });
    } finally {
      seen.now--;
    }
  };
  return { seen, fetchFn };
}

describe("LightningStoreClient's requests in flight", () => {
  it("holds at most maxConcurrentRequests open and completes every call", async () => {
    const { seen, fetchFn } = countingFetch(5);
    const client = new LightningStoreClient("http://store.invalid", { fetch: fetchFn, maxConcurrentRequests: 8 });
    const ids = await Promise.all(Array.from({ length: 200 }, () => client.getNextSpanSequenceId("ro-1", "at-1")));
    expect(ids).toHaveLength(200);
    expect(seen.calls).toBe(200);
    expect(seen.most).toBe(8);
  });

  it("defaults to 64", async () => {
    const { seen, fetchFn } = countingFetch(5);
    const client = new LightningStoreClient("http://store.invalid", { fetch: fetchFn });
    await Promise.all(Array.from({ length: 200 }, () => client.getNextSpanSequenceId("ro-1", "at-1")));
    expect(seen.most).toBe(64);
  });

  it("a call waiting for a slot ends when the client closes", async () => {
    const { fetchFn } = countingFetch(60_000);
    const client = new LightningStoreClient("http://store.invalid", { fetch: fetchFn, maxConcurrentRequests: 1, retryDelays: [] });
    const first = client.getNextSpanSequenceId("ro-1", "at-1");
    const queued = client.getNextSpanSequenceId("ro-1", "at-1");
    await new Promise((r) => setTimeout(r, 10));
    await client.close();
    await expect(first).rejects.toBeInstanceOf(StoreConnectionError);
    await expect(queued).rejects.toBeInstanceOf(StoreConnectionError);
  });

  it("refuses a size that is not a positive integer", () => {
    for (const size of [0, -1, 1.5, Number.NaN]) expect(() => new RequestSlots(size)).toThrow(/maxConcurrentRequests/);
  });

  it("gives slots in order and drops a waiter whose signal aborts", async () => {
    const slots = new RequestSlots(1);
    const order: string[] = [];
    let releaseFirst!: () => void;
    const first = slots.run(undefined, () => new Promise<void>((r) => (releaseFirst = r)).then(() => void order.push("a")));
    const ac = new AbortController();
    const dropped = slots.run(ac.signal, async () => void order.push("dropped"));
    const third = slots.run(undefined, async () => void order.push("c"));
    ac.abort(new Error("gave up"));
    await expect(dropped).rejects.toThrow("gave up");
    releaseFirst();
    await Promise.all([first, third]);
    expect(order).toEqual(["a", "c"]);
  });
});
