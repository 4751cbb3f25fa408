/**
 * TEST-ONLY hooks, never enabled by default (the runtimes' `--test-clock` flag turns them on). They let
 * the store conformance suite, which drives a `ManualClock` and wants a fresh store per test, run
 * unchanged against a server in another process:
 * - every request may carry `x-agl-test-clock: <seconds>`; the server's ManualClock is set to it first;
 * - `POST /v1/agl/__test__/reset` closes the store and starts a fresh one on the same clock.
 */
import type { Hono } from "hono";
import type { LightningStore } from "../store/base.ts";
import { ManualClock, ValidationError } from "../types/index.ts";

export const TEST_CLOCK_HEADER = "x-agl-test-clock";

export interface TestHooks {
  install(app: Hono, prefix: string): void;
}

export interface TestStore {
  /** Delegates to the current store; `reset` swaps what it delegates to. */
  store: LightningStore;
  clock: ManualClock;
  hooks: TestHooks;
}

export function createTestStore(makeStore: (clock: ManualClock) => LightningStore): TestStore {
  const clock = new ManualClock();
  let current = makeStore(clock);
  const store = new Proxy({} as LightningStore, {
    get(_t, prop) {
      const v = Reflect.get(current, prop, current) as unknown;
      return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(current) : v;
    },
  });
  const hooks: TestHooks = {
    install(app, prefix) {
      app.use("*", async (c, next) => {
        const t = c.req.header(TEST_CLOCK_HEADER);
        if (t !== undefined) {
          const v = Number(t);
          if (!Number.isFinite(v)) throw new ValidationError(`${TEST_CLOCK_HEADER} must be a number of seconds`, [TEST_CLOCK_HEADER]);
          clock.set(v);
        }
        return next();
      });
      app.post(`${prefix}/__test__/reset`, async (c) => {
        const old = current;
        current = makeStore(clock);
        await old.close();
        return c.json({ status: "reset" });
      });
    },
  };
  return { store, clock, hooks };
}
