/**
 * TEST-ONLY hooks, never enabled by default (the runtimes' `--test-clock` flag turns them on). They let
 * the store conformance suite, which drives a `ManualClock` and wants a fresh store per test, run
 * unchanged against a server in another process:
 * - every request may carry `x-agl-test-clock: <seconds>`; the server's ManualClock is set to it first;
 * - `POST /v1/agl/__test__/reset` closes the store and starts a fresh one on the same clock; where the
 *   store is a file that several processes serve (`agl store --workers N`), it empties the file instead.
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

export interface TestStoreOptions {
  /** The clock the store reads (default: a new ManualClock). */
  clock?: ManualClock;
  /** What a reset does instead of replacing the store (a store that other processes share stays). */
  reset?: () => Promise<void>;
}

export function createTestStore(makeStore: (clock: ManualClock) => LightningStore, options: TestStoreOptions = {}): TestStore {
  const clock = options.clock ?? new ManualClock();
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
        if (options.reset) {
          await options.reset();
          return c.json({ status: "reset" });
        }
        const old = current;
        current = makeStore(clock);
        await old.close();
        return c.json({ status: "reset" });
      });
    },
  };
  return { store, clock, hooks };
}

/** The tables holding a store's data, emptied by `emptyDatabase` (the row counters follow through their triggers). */
const DATA_TABLES = ["spans", "span_sequences", "queue", "attempts", "rollouts", "resources", "workers"];

/**
 * Deletes every row of the store's data in the libSQL database at `url`, through a connection of its
 * own: the stores open on it (in this and other processes) see another connection's commit and drop
 * what they cached.
 */
export async function emptyDatabase(url: string, authToken?: string): Promise<void> {
  const { openDriver, parseDbUrl } = await import("../store/libsql/driver.ts");
  const driver = await openDriver(parseDbUrl(url), { busyTimeoutMs: 10_000, authToken });
  try {
    await driver.tx("w", async (c) => {
      for (const table of DATA_TABLES) await c.run(`DELETE FROM "${table}"`);
      await c.run(`UPDATE "row_counts" SET "n" = 0`);
    });
  } finally {
    await driver.close();
  }
}
