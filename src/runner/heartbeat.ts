/**
 * Worker heartbeats (runtime.md §2.9): `updateWorker(label, snapshot)` every `interval ± jitter`.
 *
 * - "asyncio": one loop that takes a snapshot and sends it, each step bounded by the interval.
 * - "thread": a producer that refreshes the snapshot and a consumer that sends the latest one, as two
 *   independent loops, so a slow store never delays sampling and a stuck sampler never sends stale
 *   data: the consumer skips (debug "no snapshot yet") before the first snapshot and skips a snapshot
 *   older than `interval + jitter + 1 s`, warning "snapshot stale" once per distinct snapshot. JS has
 *   no threads on one event loop; the observable behaviour is upstream's.
 */
import type { LightningStore } from "../store/base.ts";
import { getLogger } from "../tracer/log.ts";
import { ValidationError } from "../types/index.ts";
import { LocalEvent } from "./event.ts";
import { systemSnapshot } from "./system-snapshot.ts";

const log = getLogger("agentlightning.runner.heartbeat");

export type HeartbeatMode = "asyncio" | "thread";

export interface HeartbeatOptions {
  store: LightningStore;
  workerLabel: string;
  intervalSeconds: number;
  jitterSeconds: number;
  mode: string;
  includeGpu?: boolean;
  /** The sampler; `systemSnapshot` by default. */
  snapshot?: () => Record<string, unknown> | Promise<Record<string, unknown>>;
  random?: () => number;
}

class TimeoutError extends Error {}

function withTimeout<T>(p: Promise<T>, seconds: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new TimeoutError()), Math.max(0, seconds * 1000));
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/** Starts the loop; returns an async stopper, or null when heartbeats are disabled. */
export function startHeartbeatLoop(o: HeartbeatOptions): (() => Promise<void>) | null {
  if (!(o.intervalSeconds > 0)) return null;
  if (o.mode !== "asyncio" && o.mode !== "thread") {
    throw new ValidationError(`Unsupported heartbeat launch mode '${o.mode}'; use 'asyncio' or 'thread'`, ["heartbeatLaunchMode"]);
  }
  const random = o.random ?? Math.random;
  const interval = o.intervalSeconds;
  const nextWait = () => Math.max(interval + (random() * 2 - 1) * o.jitterSeconds, 0.01);
  const sample = () => Promise.resolve().then(() => (o.snapshot ?? (() => systemSnapshot(o.includeGpu ?? false)))());
  const stop = new LocalEvent();

  const send = async (stats: Record<string, unknown>): Promise<void> => {
    try {
      await withTimeout(o.store.updateWorker(o.workerLabel, stats), interval);
    } catch (err) {
      if (err instanceof TimeoutError) log.warn(`[${o.workerLabel}] Heartbeat update timed out after ${interval}s`);
      else log.error(`[${o.workerLabel}] Heartbeat update failed`, err);
    }
  };

  if (o.mode === "asyncio") {
    const emit = async (): Promise<void> => {
      let stats: Record<string, unknown>;
      try {
        stats = await withTimeout(sample(), interval);
      } catch (err) {
        if (err instanceof TimeoutError) log.warn(`[${o.workerLabel}] Heartbeat snapshot timed out after ${interval}s; skipping`);
        else log.error(`[${o.workerLabel}] Heartbeat snapshot failed; skipping`, err);
        return;
      }
      await send(stats);
    };
    const task = (async () => {
      while (!stop.isSet()) {
        try {
          await emit();
        } catch (err) {
          log.error(`[${o.workerLabel}] Heartbeat failed`, err);
        }
        await stop.wait(nextWait());
      }
    })();
    return async () => {
      stop.set();
      await task;
    };
  }

  let latest: { stats: Record<string, unknown>; at: number } | null = null;
  let warnedStale: object | null = null;
  const staleAfter = interval + o.jitterSeconds + 1.0;
  let firstTry!: () => void;
  const firstTried = new Promise<void>((r) => (firstTry = r));
  const producer = (async () => {
    while (!stop.isSet()) {
      try {
        latest = { stats: await sample(), at: performance.now() / 1000 };
      } catch (err) {
        log.warn(`[${o.workerLabel}] Heartbeat producer: system_snapshot failed`, err);
      }
      firstTry();
      await stop.wait(nextWait());
    }
  })();
  const consumer = (async () => {
    // Let the producer try its first sample before the first send.
    await Promise.race([firstTried, stop.wait()]);
    while (!stop.isSet()) {
      const snap = latest as { stats: Record<string, unknown>; at: number } | null;
      if (snap === null) log.debug(`[${o.workerLabel}] Heartbeat consumer: no snapshot yet`);
      else if (performance.now() / 1000 - snap.at > staleAfter) {
        if (warnedStale !== snap) {
          warnedStale = snap;
          log.warn(`[${o.workerLabel}] Heartbeat consumer: snapshot stale; skipping`);
        }
      } else await send(snap.stats);
      await stop.wait(nextWait());
    }
  })();
  return async () => {
    stop.set();
    await Promise.all([producer, consumer]);
  };
}
