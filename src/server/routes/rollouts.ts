/** Rollouts and the queue: enqueue, dequeue (claims), search, start, get and update. */
import { Hono } from "hono";
import { readBody } from "../json-body.ts";
import { MAX_DEQUEUE_SIZE, listAnswer } from "../paging.ts";
import { queryParams } from "../query-params.ts";
import * as S from "../schemas.ts";
import type { RouteDeps } from "./deps.ts";

export function rolloutRoutes(deps: RouteDeps): Hono {
  const { store, sizes, idempotent } = deps;
  const routes = new Hono();
  routes.post("/queues/rollouts/enqueue", idempotent, async (c) => {
    const { rollouts } = await readBody(c, S.EnqueueBody);
    if (rollouts.length === 0) return c.json([], 201);
    if (rollouts.length === 1) {
      const { input, ...opts } = rollouts[0]!;
      return c.json([await store.enqueueRollout(input, opts)], 201);
    }
    return c.json(await store.enqueueManyRollouts(rollouts), 201);
  });
  routes.post("/queues/rollouts/dequeue", idempotent, async (c) => {
    const b = await readBody(c, S.DequeueBody, true);
    if (b.limit <= 0) return c.json([]);
    if (b.limit === 1) {
      const one = await store.dequeueRollout({ worker_id: b.worker_id ?? null });
      return c.json(one ? [one] : []);
    }
    return c.json(
      await store.dequeueManyRollouts({ limit: Math.min(b.limit, sizes.maxSize ?? MAX_DEQUEUE_SIZE), worker_id: b.worker_id ?? null }),
    );
  });
  routes.post("/rollouts/search", async (c) =>
    listAnswer(c, await readBody(c, S.RolloutSearch, true), deps, (q) => store.queryRollouts(q)),
  );
  routes.get("/rollouts", async (c) => listAnswer(c, queryParams(c, S.RolloutSearch), deps, (q) => store.queryRollouts(q)));
  routes.post("/rollouts", idempotent, async (c) => {
    const { input, ...opts } = await readBody(c, S.StartRolloutBody);
    return c.json(await store.startRollout(input, opts), 201);
  });
  // Single-item lookups answer `200 null` for an unknown id, as upstream's Python client expects (docs/departures.md#2).
  routes.get("/rollouts/:rollout_id", async (c) => c.json(await store.getRolloutById(c.req.param("rollout_id"))));
  routes.post("/rollouts/:rollout_id", idempotent, async (c) =>
    c.json(await store.updateRollout(c.req.param("rollout_id"), await readBody(c, S.RolloutPatchBody))),
  );
  return routes;
}
