/**
 * `POST /v1/agl/attempts/finish`: an attempt's last spans, its final update and the next claim in one
 * request. Parts run in order; bad input in any envelope changes nothing; a part failing in the store
 * answers its own typed error with `failed_part` and `completed`, and what earlier parts stored stays.
 */
import { afterEach, describe, expect, it } from "vitest";
import { LightningStoreClient, finishAttempt, finishFailure } from "../../src/client/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { MAX_COUNTED_SEQUENCE_ID } from "../../src/store/decisions.ts";
import {
  ConflictError,
  NotFoundError,
  ValidationError,
  spanFromAttributes,
  type AttemptedRollout,
  type Span,
} from "../../src/types/index.ts";
import { startInProcess, type InProcessServer } from "./in-process.ts";

/** A store whose claims can be made to fail, to see what the earlier parts left. */
class FlakyClaimStore extends InMemoryLightningStore {
  failClaims = false;
  override async dequeueRollout(options?: { worker_id?: string | null }): Promise<AttemptedRollout | null> {
    if (this.failClaims) throw new ConflictError("claims are refused in this test");
    return super.dequeueRollout(options);
  }
}

let store: FlakyClaimStore;
let server: InProcessServer;
afterEach(async () => {
  await server?.close();
  await store?.close();
});

/** A store with two queued rollouts, the first claimed by Worker-0. */
async function setup(): Promise<{ first: AttemptedRollout; secondId: string }> {
  store = new FlakyClaimStore({ scanDebounceSeconds: 0 });
  server = await startInProcess(store);
  await store.enqueueRollout("one");
  const second = await store.enqueueRollout("two");
  const first = (await store.dequeueRollout({ worker_id: "Worker-0" }))!;
  return { first, secondId: second.rollout_id };
}

const post = (body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${server.url}/v1/agl/attempts/finish`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });

const unnumbered = (r: AttemptedRollout, name: string) => ({
  ...spanFromAttributes({ rollout_id: r.rollout_id, attempt_id: r.attempt.attempt_id, sequence_id: 1, name }),
  sequence_id: null,
});

const ids = (r: AttemptedRollout) => ({ rollout_id: r.rollout_id, attempt_id: r.attempt.attempt_id });

async function snapshot(first: AttemptedRollout, secondId: string) {
  return {
    spans: (await store.querySpans(first.rollout_id)).items.map((s) => [s.name, s.sequence_id]),
    attempt: (await store.getLatestAttempt(first.rollout_id))!.status,
    second: (await store.getRolloutById(secondId))!.status,
  };
}

describe("POST /v1/agl/attempts/finish", () => {
  it("stores the spans (numbered server-side), sets the status, then claims the next rollout for the worker", async () => {
    const { first, secondId } = await setup();
    const res = await post({
      ...ids(first),
      spans: [unnumbered(first, "a"), unnumbered(first, "b")],
      attempt: { status: "succeeded" },
      claim: { worker_id: "Worker-0" },
    });
    expect(res.status).toBe(200);
    const out = (await res.json()) as { spans: Span[]; attempt: { status: string }; next: AttemptedRollout };
    expect(out.spans.map((s) => [s.name, s.sequence_id])).toEqual([
      ["a", 1],
      ["b", 2],
    ]);
    expect(out.attempt.status).toBe("succeeded");
    expect(out.next.rollout_id).toBe(secondId);
    expect(out.next.attempt.worker_id).toBe("Worker-0");
    expect(await snapshot(first, secondId)).toEqual({
      spans: [
        ["a", 1],
        ["b", 2],
      ],
      attempt: "succeeded",
      second: "preparing",
    });
    expect((await store.getRolloutById(first.rollout_id))!.status).toBe("succeeded");
    expect((await store.getWorkerById("Worker-0"))!.current_rollout_id).toBe(secondId);
  });

  it("answers [index, sequence_id] per span with Prefer: return=minimal", async () => {
    const { first } = await setup();
    const res = await post({ ...ids(first), spans: [unnumbered(first, "a")], attempt: { status: "failed" } }, { prefer: "return=minimal" });
    expect(res.headers.get("preference-applied")).toBe("return=minimal");
    expect(((await res.json()) as { spans: unknown }).spans).toEqual([[0, 1]]);
  });

  it("without a claim leaves the queue alone; with an empty queue the claim answers null", async () => {
    const { first, secondId } = await setup();
    const res = await post({ ...ids(first), attempt: { status: "succeeded" } });
    expect(((await res.json()) as { next: unknown }).next).toBeNull();
    expect(await snapshot(first, secondId)).toEqual({ spans: [], attempt: "succeeded", second: "queuing" });
    const second = (await store.dequeueRollout({ worker_id: "Worker-1" }))!;
    const empty = await post({ ...ids(second), attempt: { status: "succeeded" }, claim: { worker_id: "Worker-1" } });
    expect(empty.status).toBe(200);
    expect(((await empty.json()) as { next: unknown }).next).toBeNull();
    expect((await store.getRolloutById(second.rollout_id))!.status).toBe("succeeded");
    expect((await store.getWorkerById("Worker-1"))!.status).toBe("idle");
  });

  const envelopeCases: { label: string; body: (r: AttemptedRollout) => unknown; path: (string | number)[] }[] = [
    {
      label: "a bad status",
      body: (r) => ({ ...ids(r), spans: [unnumbered(r, "a")], attempt: { status: "done" }, claim: {} }),
      path: ["attempt", "status"],
    },
    {
      label: "an unknown attempt field",
      body: (r) => ({ ...ids(r), spans: [unnumbered(r, "a")], attempt: { status: "succeeded", colour: 1 }, claim: {} }),
      path: ["attempt"],
    },
    {
      label: "a bad claim",
      body: (r) => ({ ...ids(r), spans: [unnumbered(r, "a")], attempt: { status: "succeeded" }, claim: { worker_id: 7 } }),
      path: ["claim", "worker_id"],
    },
    { label: "a missing attempt id", body: (r) => ({ rollout_id: r.rollout_id, attempt: { status: "succeeded" } }), path: ["attempt_id"] },
    { label: "spans not a list", body: (r) => ({ ...ids(r), spans: {}, attempt: { status: "succeeded" } }), path: ["spans"] },
  ];
  for (const c of envelopeCases) {
    it(`${c.label}: 400 with the issue path, nothing stored or claimed`, async () => {
      const { first, secondId } = await setup();
      const before = await snapshot(first, secondId);
      const res = await post(c.body(first));
      expect(res.status).toBe(400);
      const err = (await res.json()) as { error_type: string; issues: { path: unknown[] }[] };
      expect(err.error_type).toBe("ValidationError");
      expect(err.issues[0]!.path).toEqual(c.path);
      expect(await snapshot(first, secondId)).toEqual(before);
    });
  }

  it("a bad span: 400 for the spans part, nothing stored, status and claim not applied", async () => {
    const { first, secondId } = await setup();
    const res = await post({
      ...ids(first),
      spans: [unnumbered(first, "a"), { ...unnumbered(first, "b"), events: "none" }],
      attempt: { status: "succeeded" },
      claim: {},
    });
    expect(res.status).toBe(400);
    const err = (await res.json()) as { failed_part: string; completed: string[]; issues: { path: unknown[] }[] };
    expect([err.failed_part, err.completed, err.issues[0]!.path]).toEqual(["spans", [], [1, "events"]]);
    expect(await snapshot(first, secondId)).toEqual({ spans: [], attempt: "preparing", second: "queuing" });
  });

  it("an unknown attempt: 404 for the attempt part; the spans stay stored; no claim", async () => {
    const { first, secondId } = await setup();
    const res = await post({
      rollout_id: first.rollout_id,
      attempt_id: "at-00000000",
      spans: [unnumbered(first, "a")],
      attempt: { status: "succeeded" },
      claim: {},
    });
    expect(res.status).toBe(404);
    const err = (await res.json()) as { error_type: string; failed_part: string; completed: string[] };
    expect([err.error_type, err.failed_part, err.completed]).toEqual(["NotFoundError", "attempt", ["spans"]]);
    // The stored span moved the attempt to running, as any span does.
    expect(await snapshot(first, secondId)).toEqual({ spans: [["a", 1]], attempt: "running", second: "queuing" });
  });

  it("a failing claim: its own error (409); the spans and the status stay stored", async () => {
    const { first, secondId } = await setup();
    store.failClaims = true;
    const res = await post({
      ...ids(first),
      spans: [unnumbered(first, "a")],
      attempt: { status: "succeeded" },
      claim: { worker_id: "Worker-0" },
    });
    expect(res.status).toBe(409);
    const err = (await res.json()) as { error_type: string; failed_part: string; completed: string[] };
    expect([err.error_type, err.failed_part, err.completed]).toEqual(["ConflictError", "claim", ["spans", "attempt"]]);
    expect(await snapshot(first, secondId)).toEqual({ spans: [["a", 1]], attempt: "succeeded", second: "queuing" });
  });
});

describe("numbering after a client-supplied sequence id at the top of the safe range", () => {
  it("/spans/next, /spans/next/many, /spans/batch and /attempts/finish keep handing out exact ids", async () => {
    const { first } = await setup();
    const call = (path: string, body: unknown) =>
      fetch(`${server.url}/v1/agl${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const top = spanFromAttributes({ ...ids(first), sequence_id: Number.MAX_SAFE_INTEGER, name: "top" });
    expect((await call("/spans", top)).status).toBe(201);
    const next = MAX_COUNTED_SEQUENCE_ID + 1;
    const one = await call("/spans/next", ids(first));
    expect([one.status, await one.json()]).toEqual([200, { sequence_id: next }]);
    const many = await call("/spans/next/many", { pairs: [[first.rollout_id, first.attempt.attempt_id]] });
    expect([many.status, await many.json()]).toEqual([200, { sequence_ids: [next + 1] }]);
    const batch = await call("/spans/batch", { spans: [unnumbered(first, "batched")] });
    expect(batch.status).toBe(201);
    expect(((await batch.json()) as Span[]).map((s) => s.sequence_id)).toEqual([next + 2]);
    const finished = await post({ ...ids(first), spans: [unnumbered(first, "last")], attempt: { status: "succeeded" } });
    expect(finished.status).toBe(200);
    expect(((await finished.json()) as { spans: Span[] }).spans.map((s) => s.sequence_id)).toEqual([next + 3]);
  });
});

describe("finishAttempt (client over HTTP, and the same helper on an in-process store)", () => {
  const via = {
    client: () => new LightningStoreClient(server.url, { retryDelays: [], healthRetryDelays: [] }),
    "in-process store": () => store,
  };
  for (const [name, target] of Object.entries(via)) {
    it(`${name}: the same result and the same typed errors with finishFailure`, async () => {
      const { first, secondId } = await setup();
      const s = target();
      // Over HTTP the server numbers spans; an in-process store needs them numbered.
      const spans = [unnumbered(first, "a"), unnumbered(first, "b")].map((sp, i) =>
        name === "client" ? sp : { ...sp, sequence_id: i + 1 },
      ) as unknown as Span[];
      const done = await finishAttempt(s, { ...ids(first), spans, attempt: { status: "succeeded" }, claim: { worker_id: "Worker-0" } });
      expect(done.sequence_ids).toEqual([1, 2]);
      expect(done.attempt.status).toBe("succeeded");
      expect(done.next!.rollout_id).toBe(secondId);

      const missing = await finishAttempt(s, {
        rollout_id: first.rollout_id,
        attempt_id: "at-00000000",
        attempt: { status: "failed" },
      }).catch((e: unknown) => e);
      expect(missing).toBeInstanceOf(NotFoundError);
      expect(finishFailure(missing)).toEqual({ failed: "attempt", completed: [] });

      const next = done.next!;
      const badSpan = { ...unnumbered(next, "x"), sequence_id: 1, events: "none" } as unknown as Span;
      const bad = await finishAttempt(s, { ...ids(next), spans: [badSpan], attempt: { status: "succeeded" } }).catch((e: unknown) => e);
      expect(bad).toBeInstanceOf(ValidationError);
      expect(finishFailure(bad)).toEqual({ failed: "spans", completed: [] });
      expect((await store.getLatestAttempt(next.rollout_id))!.status).toBe("preparing");

      store.failClaims = true;
      const claim = await finishAttempt(s, { ...ids(next), attempt: { status: "succeeded" }, claim: {} }).catch((e: unknown) => e);
      expect(claim).toBeInstanceOf(ConflictError);
      expect(finishFailure(claim)).toEqual({ failed: "claim", completed: ["attempt"] });
      expect((await store.getLatestAttempt(next.rollout_id))!.status).toBe("succeeded");
      if (s instanceof LightningStoreClient) await s.close();
    });
  }
});
