/**
 * The client's transport policy over a scripted `fetch`: which failures are retried, the health probe
 * between retries, per-request timeouts, typed errors, and no retries for dequeues.
 */
import { describe, expect, it } from "vitest";
import { LightningStoreClient, StoreConnectionError, StoreHttpError } from "../../src/client/index.ts";
import { NotFoundError, ValidationError } from "../../src/types/index.ts";

type Step = number | "network" | "hang";

/** A fetch that answers from a script per path kind; records every call. */
function scripted(api: Step[], health: Step[] = [200]) {
  const calls: string[] = [];
  const next = (list: Step[]): Step => (list.length > 1 ? list.shift()! : list[0]!);
  const fetchFn: typeof fetch = async (input, init) => {
    const url = String(input);
    const isHealth = url.endsWith("/health");
    calls.push(isHealth ? "health" : `${init?.method ?? "GET"} ${new URL(url).pathname}`);
    const step = next(isHealth ? health : api);
    if (step === "network") throw new TypeError("fetch failed: ECONNREFUSED");
    if (step === "hang") {
      return new Promise<Response>((_, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal!.reason)));
    }
    const body =
      step < 300
        ? isHealth
          ? { status: "ok" }
          : { name: "S", total_rollouts: 1 }
        : {
            detail: `failure ${step}`,
            error_type: step === 404 ? "NotFoundError" : step === 400 ? "ValidationError" : "ServerError",
            issues: step === 400 ? [{ path: ["x"], message: "bad" }] : undefined,
          };
    return new Response(JSON.stringify(body), { status: step, headers: { "content-type": "application/json" } });
  };
  return { calls, fetchFn };
}

const client = (fetchFn: typeof fetch, o: { retryDelays?: number[]; healthRetryDelays?: number[]; requestTimeout?: number } = {}) =>
  new LightningStoreClient("http://store.invalid:4747/", {
    retryDelays: [0.01, 0.01, 0.01],
    healthRetryDelays: [0.01],
    fetch: fetchFn,
    ...o,
  });

describe("LightningStoreClient retries", () => {
  it.each([
    ["network errors", "network"],
    ["503", 503],
    ["500", 500],
    ["429", 429],
    ["408", 408],
  ] as const)("retries %s, probing health in between", async (_l, failure) => {
    const { calls, fetchFn } = scripted([failure, failure, 200]);
    expect(await client(fetchFn).statistics()).toMatchObject({ total_rollouts: 1 });
    expect(calls).toEqual(["GET /v1/agl/statistics", "health", "GET /v1/agl/statistics", "health", "GET /v1/agl/statistics"]);
  });

  it.each([400, 401, 403, 404, 409, 413])("does not retry %i", async (status) => {
    const { calls, fetchFn } = scripted([status]);
    await expect(client(fetchFn).statistics()).rejects.toThrow();
    expect(calls).toEqual(["GET /v1/agl/statistics"]);
  });

  it("gives up at once when the health probe never succeeds", async () => {
    const { calls, fetchFn } = scripted(["network"], ["network"]);
    await expect(client(fetchFn).statistics()).rejects.toBeInstanceOf(StoreConnectionError);
    expect(calls).toEqual(["GET /v1/agl/statistics", "health", "health"]);
  });

  it("stops after the last retry with the last error, status kept", async () => {
    const { calls, fetchFn } = scripted([502]);
    const err = await client(fetchFn)
      .statistics()
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreHttpError);
    expect((err as StoreHttpError).status).toBe(502);
    expect(calls.filter((c) => c !== "health")).toHaveLength(4);
  });

  it("a request that hangs past the timeout is aborted and retried", async () => {
    const { calls, fetchFn } = scripted(["hang", 200]);
    const t0 = performance.now();
    expect(await client(fetchFn, { requestTimeout: 0.2 }).statistics()).toMatchObject({ name: "S" });
    expect(performance.now() - t0).toBeGreaterThanOrEqual(190);
    expect(calls.filter((c) => c !== "health")).toHaveLength(2);
  });

  it("dequeues are never retried", async () => {
    const { calls, fetchFn } = scripted([503]);
    await expect(client(fetchFn).dequeueRollout({ worker_id: "w" })).rejects.toBeInstanceOf(StoreHttpError);
    expect(calls).toEqual(["POST /v1/agl/queues/rollouts/dequeue"]);
  });

  it("maps error bodies back to typed errors; single-item GETs give null for 404", async () => {
    const v = await client(scripted([400]).fetchFn)
      .enqueueRollout(1)
      .catch((e: unknown) => e);
    expect(v).toBeInstanceOf(ValidationError);
    expect((v as ValidationError).issues).toEqual([{ path: ["x"], message: "bad" }]);
    expect(await client(scripted([404]).fetchFn).getRolloutById("ro-1")).toBeNull();
    await expect(client(scripted([404]).fetchFn).updateRollout("ro-1", { status: "failed" })).rejects.toBeInstanceOf(NotFoundError);
  });

  it("a 404 from an unknown route is not mistaken for an unknown id", async () => {
    const fetchFn: typeof fetch = async () =>
      new Response(JSON.stringify({ detail: "No route", error_type: "RouteNotFound" }), { status: 404 });
    await expect(client(fetchFn).getRolloutById("ro-1")).rejects.toBeInstanceOf(StoreHttpError);
  });

  it("a caller's AbortSignal cancels a long wait", async () => {
    const { fetchFn } = scripted(["hang"]);
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error("stop")), 100);
    await expect(client(fetchFn).waitForRollouts({ rollout_ids: ["ro-1"], timeout: null, signal: ac.signal })).rejects.toThrow("stop");
  });

  it("a NaN wait timeout is refused before any request", async () => {
    const { calls, fetchFn } = scripted([200]);
    await expect(client(fetchFn).waitForRollouts({ rollout_ids: ["ro-1"], timeout: Number.NaN })).rejects.toBeInstanceOf(ValidationError);
    expect(calls).toEqual([]);
  });
});
