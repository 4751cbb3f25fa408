/**
 * A small server that answers the way Agent Lightning v0.3.0's `LightningStoreServer` (FastAPI) does,
 * over one of our in-memory stores, for checking our client and runner against upstream's server:
 * - only upstream's routes: no `/spans/batch`, `/spans/next/many`, `/attempts/finish`; an unknown path
 *   is 404 `{"detail": "Not Found"}`;
 * - a lookup of an unknown id is `200 null`, except `GET /rollouts/{id}`: a 500 ResponseValidationError
 *   (its response model refuses the null);
 * - any store error is a 500 `{"detail": "Internal server error", "error_type", "traceback"}` naming the
 *   Python exception (a ValueError for unknown ids), which clients retry;
 * - a body pydantic rejects is a 422 with pydantic's error list; the paginated routes' own checks are
 *   400 with a string detail;
 * - no long-poll header on waits, and a wait with `timeout: null` is held until the rollouts finish.
 * Every request is counted by method and route template.
 */
import { serve } from "@hono/node-server";
import { Hono, type Context } from "hono";
import type { AddressInfo } from "node:net";
import { z } from "zod";
import { InMemoryLightningStore } from "../../src/store/memory.ts";

const PYTHON_EXCEPTION: Record<string, string> = {
  NotFoundError: "ValueError",
  ValidationError: "ValueError",
  ConflictError: "ValueError",
};

/** A FastAPI 422: pydantic's errors, `loc` starting with "body". */
function unprocessable(c: Context, error: z.ZodError, input: unknown) {
  const detail = error.issues.map((i) => ({
    type: i.code === "invalid_value" ? "literal_error" : i.code,
    loc: ["body", ...i.path.map((p) => (typeof p === "symbol" ? String(p) : p))],
    msg: i.message,
    input,
  }));
  return c.json({ detail }, 422);
}

class UpstreamBodyError extends Error {
  constructor(
    readonly error: z.ZodError,
    readonly input: unknown,
  ) {
    super("422");
  }
}

const RolloutStatus = z.enum(["queuing", "preparing", "running", "failed", "succeeded", "cancelled", "requeuing"]);
const AttemptStatus = z.enum(["preparing", "running", "failed", "succeeded", "unresponsive", "timeout"]);
const UpdateRollout = z.object({ status: RolloutStatus.nullable().optional() }).loose();
const UpdateAttempt = z.object({ status: AttemptStatus.nullable().optional() }).loose();
const Enqueue = z.object({ rollouts: z.array(z.object({ input: z.unknown() }).loose()) });

export interface UpstreamShapedServer {
  url: string;
  store: InMemoryLightningStore;
  /** Requests by "METHOD /route/{template}" (ids replaced). */
  counts: Record<string, number>;
  close(): Promise<void>;
}

export async function startUpstreamShapedServer(): Promise<UpstreamShapedServer> {
  const store = new InMemoryLightningStore({ scanDebounceSeconds: 0 });
  const counts: Record<string, number> = {};
  const app = new Hono();

  app.use("*", async (c, next) => {
    const route = `${c.req.method} ${c.req.path.replace(/\/(ro|at|rs)-[0-9a-f]+/g, "/{id}").replace(/\/workers\/[^/]+$/, "/workers/{id}")}`;
    counts[route] = (counts[route] ?? 0) + 1;
    await next();
  });
  app.onError((err, c) => {
    if (err instanceof UpstreamBodyError) return unprocessable(c, err.error, err.input);
    const type = PYTHON_EXCEPTION[(err as { errorType?: string }).errorType ?? ""] ?? err.name;
    const traceback = `Traceback (most recent call last):\n  File "agentlightning/store/client_server.py", line 1612, in _call_store_method\n${type}: ${err.message}\n`;
    return c.json({ detail: "Internal server error", error_type: type, traceback }, 500);
  });
  app.notFound((c) => c.json({ detail: "Not Found" }, 404));

  const json = async (c: Context): Promise<unknown> => {
    const text = await c.req.text();
    return text.trim() === "" ? null : (JSON.parse(text) as unknown);
  };
  const parsed = async <T extends z.ZodType>(c: Context, schema: T): Promise<z.infer<T>> => {
    const input = await json(c);
    const out = schema.safeParse(input);
    if (!out.success) throw new UpstreamBodyError(out.error, input);
    return out.data;
  };
  /** `_validate_paginated_request`: 400 with a string detail. */
  const page = (b: { limit?: number }) =>
    b.limit === 0 || (b.limit !== undefined && b.limit < -1) ? "Limit must be greater than 0 or -1 for no limit" : null;

  const api = new Hono();
  api.get("/health", (c) => c.json({ status: "ok" }));
  api.post("/queues/rollouts/enqueue", async (c) => {
    const { rollouts } = await parsed(c, Enqueue);
    return c.json(await store.enqueueManyRollouts(rollouts as never), 201);
  });
  api.post("/queues/rollouts/dequeue", async (c) => {
    const b = ((await json(c)) ?? {}) as { limit?: number; worker_id?: string | null };
    return c.json(await store.dequeueManyRollouts({ limit: b.limit ?? 1, worker_id: b.worker_id ?? null }));
  });
  api.post("/rollouts", async (c) => {
    const { input, ...o } = (await json(c)) as { input: unknown };
    return c.json(await store.startRollout(input, o as never), 201);
  });
  api.post("/rollouts/search", async (c) => {
    const b = ((await json(c)) ?? {}) as Record<string, unknown>;
    const bad = page(b);
    if (bad) return c.json({ detail: bad }, 400);
    return c.json(await store.queryRollouts(b as never));
  });
  api.get("/rollouts/:id", async (c) => {
    const r = await store.getRolloutById(c.req.param("id"));
    if (r === null)
      throw Object.assign(new Error("1 validation error: Input should be a valid dictionary or object"), {
        name: "ResponseValidationError",
      });
    return c.json(r);
  });
  api.post("/rollouts/:id", async (c) => c.json(await store.updateRollout(c.req.param("id"), (await parsed(c, UpdateRollout)) as never)));
  api.post("/rollouts/:id/attempts", async (c) => {
    const b = ((await json(c)) ?? {}) as { worker_id?: string | null };
    return c.json(await store.startAttempt(c.req.param("id"), { worker_id: b.worker_id ?? null }), 201);
  });
  api.post("/rollouts/:id/attempts/search", async (c) =>
    c.json(await store.queryAttempts(c.req.param("id"), ((await json(c)) ?? {}) as never)),
  );
  api.get("/rollouts/:id/attempts/latest", async (c) => c.json(await store.getLatestAttempt(c.req.param("id"))));
  api.post("/rollouts/:id/attempts/:aid", async (c) =>
    c.json(await store.updateAttempt(c.req.param("id"), c.req.param("aid"), (await parsed(c, UpdateAttempt)) as never)),
  );
  api.post("/workers/search", async (c) => c.json(await store.queryWorkers(((await json(c)) ?? {}) as never)));
  api.get("/workers/:id", async (c) => c.json(await store.getWorkerById(c.req.param("id"))));
  api.post("/workers/:id", async (c) => {
    const b = (await json(c)) as { heartbeat_stats?: Record<string, unknown> } | null;
    return c.json(await store.updateWorker(c.req.param("id"), b?.heartbeat_stats));
  });
  api.get("/statistics", async (c) => c.json(await store.statistics()));
  api.get("/resources/latest", async (c) => c.json(await store.getLatestResources()));
  api.get("/resources", async (c) => c.json(await store.queryResources()));
  api.post("/resources", async (c) => c.json(await store.addResources((await json(c)) as never), 201));
  api.get("/resources/:id", async (c) => c.json(await store.getResourcesById(c.req.param("id"))));
  api.post("/resources/:id", async (c) => c.json(await store.updateResources(c.req.param("id"), (await json(c)) as never)));
  api.post("/spans", async (c) => c.json(await store.addSpan((await json(c)) as never), 201));
  api.post("/spans/search", async (c) => {
    const { rollout_id, ...q } = (await json(c)) as { rollout_id: string };
    return c.json(await store.querySpans(rollout_id, q as never));
  });
  api.post("/spans/next", async (c) => {
    const { rollout_id, attempt_id } = (await json(c)) as { rollout_id: string; attempt_id: string };
    return c.json({ sequence_id: await store.getNextSpanSequenceId(rollout_id, attempt_id) });
  });
  api.post("/waits/rollouts", async (c) => {
    const b = (await json(c)) as { rollout_ids: string[]; timeout: number | null };
    return c.json(await store.waitForRollouts({ rollout_ids: b.rollout_ids, timeout: b.timeout }));
  });
  app.route("/v1/agl", api);

  const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
    const s = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 }, () => resolve(s));
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    store,
    counts,
    close: async () => {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await store.close();
    },
  };
}
