/** `POST /waits/rollouts`: a long poll held until the rollouts finish, the caller's timeout, or the server's cap. */
import { Hono } from "hono";
import type { Rollout } from "../../types/index.ts";
import { readBody } from "../json-body.ts";
import * as S from "../schemas.ts";
import type { RouteDeps } from "./deps.ts";

/** Longest a `POST /waits/rollouts` request is held (docs/departures.md#8). */
export const MAX_WAIT_SECONDS = 30;
/** Response header of the wait route: `true` when no asked-for rollout can still finish within this request's answer. */
export const WAIT_SETTLED_HEADER = "agl-wait-settled";

export function waitRoutes({ store, maxWaitSeconds, shutdownSignal }: RouteDeps): Hono {
  const routes = new Hono();
  routes.post("/waits/rollouts", async (c) => {
    const b = await readBody(c, S.WaitBody);
    const asked = b.timeout ?? null;
    const chunk = asked === null ? maxWaitSeconds : Math.min(Math.max(asked, 0), maxWaitSeconds);
    const signals = [c.req.raw.signal, shutdownSignal].filter((s): s is AbortSignal => s !== undefined);
    const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0];
    const t0 = Date.now();
    let done: Rollout[];
    let interrupted = false;
    try {
      done = await store.waitForRollouts({ rollout_ids: b.rollout_ids, timeout: chunk, signal });
    } catch (e) {
      if (!signal?.aborted) throw e;
      interrupted = true;
      done = await store.waitForRollouts({ rollout_ids: b.rollout_ids, timeout: 0 });
    }
    // The store returns before its deadline only when nothing it waits for is left pending.
    const settled =
      !interrupted && (Date.now() - t0 < chunk * 1000 || new Set(done.map((r) => r.rollout_id)).size === new Set(b.rollout_ids).size);
    c.header(WAIT_SETTLED_HEADER, String(settled));
    return c.json(done);
  });
  return routes;
}
