/**
 * Worker heartbeats (docs/runner.md#heartbeats): `updateWorker(label, snapshot)` every `interval ± jitter`.
 *
 * - "asyncio": one loop that takes a snapshot and sends it, each step bounded by the interval.
 * - "thread": a producer that refreshes the snapshot and a consumer that sends the latest one, as two
 *   independent loops, so a slow store never delays sampling and a stuck sampler never sends stale
 *   data: the consumer skips (debug "no snapshot yet") before the first snapshot and skips a snapshot
 *   older than `interval + jitter + 1 s`, warning "snapshot stale" once per distinct snapshot. JS has
 *   no threads on one event loop: a snapshot also ages when CPU-bound work (a training step) blocks the
 *   loop, and then the producer is not at fault, so the warning is kept for a sampler that failed or
 *   hangs, and a loop-blocked skip is logged at debug level only.
 */
import type { LightningStore } from "../store/base.ts";
import { getLogger } from "../platform/log.ts";
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
  let lastFailureAt = -Infinity;
  let samplingSince: number | null = null;
  let warnedStale: object | null = null;
  const nowSeconds = () => performance.now() / 1000;
  const staleAfter = interval + o.jitterSeconds + 1.0;
  let firstTry!: () => void;
  const firstTried = new Promise<void>((r) => (firstTry = r));
  const producer = (async () => {
    while (!stop.isSet()) {
      samplingSince = nowSeconds();
      try {
        // A hung sampler must not hold up stop(): the sample races the stop event.
        const sampled = await Promise.race([sample().then((stats) => ({ stats })), stop.wait().then(() => null)]);
        if (sampled) latest = { stats: sampled.stats, at: nowSeconds() };
      } catch (err) {
        lastFailureAt = nowSeconds();
        log.warn(`[${o.workerLabel}] Heartbeat producer: system_snapshot failed`, err);
      } finally {
        samplingSince = null;
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
      else if (nowSeconds() - snap.at > staleAfter) {
        const sampling = samplingSince as number | null;
        const samplerAtFault = lastFailureAt > snap.at || (sampling !== null && nowSeconds() - sampling > staleAfter);
        if (!samplerAtFault) log.debug(`[${o.workerLabel}] Heartbeat consumer: snapshot aged while the event loop was busy; skipping`);
        else if (warnedStale !== snap) {
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
