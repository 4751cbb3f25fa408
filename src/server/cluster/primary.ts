/**
 * The primary of `agl store --workers N`: it serves no request itself. It starts N workers (worker.ts)
 * on one port and one database, starts another in place of one that ends, keeps the answers of
 * idempotent writes for all of them, passes each worker's store changes to the others, and runs the
 * cluster's one watchdog timer on a store of its own. Claims need nothing from it: every write is a
 * `BEGIN IMMEDIATE` transaction on the shared database, so a rollout is claimed once whichever worker
 * dequeues it.
 */
import { type ClusterWorker, checkPortFree, platform, serveFetch } from "../../platform/index.ts";
import { errorLine, type LogWriter } from "../../platform/log.ts";
import type { LightningStore } from "../../store/base.ts";
import { LightningStoreCore, type StoreChange } from "../../store/core.ts";
import type { StoreServerConfig } from "../config.ts";
import { IdempotencyCache } from "../idempotency.ts";
import { isPrivateDb, openServerStore } from "../open-store.ts";
import type { ProcessMetrics } from "../metrics.ts";
import { type ServerHost, announceStoreServer, serverUrl } from "../run.ts";
import { type Channel, type ToPrimary, type ToWorker, type WireClaim, answerFromWire, answerToWire, batchedChannel } from "./protocol.ts";

/** A worker that ends within this many ms of its start counts as a failed start. */
const SHORT_LIFE_MS = 10_000;
/** Failed starts in a row after which the cluster stops rather than trying again. */
const MAX_FAILED_STARTS = 5;
/** Longest wait for the other workers' metrics during a scrape: one that has not answered by then is left out. */
const GATHER_TIMEOUT_MS = 2_000;

export interface RunningStoreCluster {
  url: string;
  /** Resolves when every worker has ended and the primary's store is closed; rejects when the cluster gave up on a worker. */
  stopped: Promise<void>;
  shutdown(): Promise<void>;
  /** The process ids of the workers running now. */
  workerPids(): number[];
}

/** One of the N places: the worker in it now, and what it holds of the primary. */
interface Slot {
  index: number;
  worker: ClusterWorker | null;
  /** The channel to `worker`. */
  channel: Channel<ToWorker, ToPrimary> | null;
  startedAt: number;
  serving: boolean;
  /** Claims of this worker that run: finished with no answer if it ends first. */
  running: Map<number, (answer: ReturnType<typeof answerFromWire> | null) => void>;
  failedStarts: number;
}

export async function startStoreCluster(config: StoreServerConfig, host: ServerHost, log: LogWriter): Promise<RunningStoreCluster> {
  if (isPrivateDb(config.db)) {
    throw new Error(
      `--workers ${config.workers} needs a database that the workers share, and ${JSON.stringify(config.db)} lives inside one process: give --db file:PATH or a libSQL server URL`,
    );
  }
  // Every worker listens on the same port number (a node:cluster primary shares one socket per number;
  // Bun's workers each bind it with reusePort): port 0 becomes a free port chosen here.
  const port = await portForWorkers(config);
  // Opened here first: the schema is brought up to date once, and a database that cannot be opened is
  // told once. Its timer is the cluster's one watchdog (none under the test clock: the tests drive time).
  const opened = await openServerStore(config.db, {
    cwd: host.cwd(),
    authToken: host.env("AGL_STORE_DB_TOKEN"),
    watchdogIntervalSeconds: config.testClock ? null : 5,
  });
  const cluster = new StoreCluster(config.workers, port, opened.store, new IdempotencyCache(config.idempotency), log);
  try {
    await cluster.start();
  } catch (e) {
    await cluster.shutdown();
    throw e;
  }
  const url = serverUrl(config.host, port);
  const location = config.testClock ? `${opened.location} (TEST CLOCK MODE: test-only hooks enabled)` : opened.location;
  announceStoreServer(config, `${host.runtime}, ${config.workers} worker processes`, url, location, log);
  if (config.testClock) log.warning("--test-clock: test-only hooks are enabled; never use this outside tests");
  host.onShutdownSignal((signal) => {
    if (cluster.stopping) {
      log.warning(`${signal} again: exiting now`);
      cluster.killAll();
      host.exit(130);
    }
    log.info(`${signal} received`);
    cluster.shutdown().catch((e: unknown) => {
      log.error(`shutdown failed: ${e instanceof Error ? e.message : String(e)}`);
      host.exit(1);
    });
  });
  return { url, stopped: cluster.stopped, shutdown: () => cluster.shutdown(), workerPids: () => cluster.workerPids() };
}

class StoreCluster {
  readonly stopped: Promise<void>;
  private readonly slots: Slot[];
  private stoppingPromise: Promise<void> | null = null;
  private gaveUp: Error | null = null;
  private settleStopped!: (e: Error | null) => void;
  /** Called as workers end while stopping. */
  private onWorkerEnded: () => void = () => {};
  /** Scrapes gathering the workers' metrics, by gathering id: each takes one worker's answer. */
  private readonly gatherings = new Map<number, (metrics: ProcessMetrics) => void>();
  private lastGatherId = 0;

  constructor(
    private readonly n: number,
    private readonly port: number,
    private readonly store: LightningStore,
    private readonly answers: IdempotencyCache,
    private readonly log: LogWriter,
  ) {
    this.stopped = new Promise<void>((resolve, reject) => (this.settleStopped = (e) => (e ? reject(e) : resolve())));
    this.slots = Array.from({ length: n }, (_, index) => ({
      index,
      worker: null,
      channel: null,
      startedAt: 0,
      serving: false,
      running: new Map(),
      failedStarts: 0,
    }));
    // The watchdog runs here: what its scans finish wakes the waits of every worker.
    if (store instanceof LightningStoreCore) store.onChange((change) => this.broadcast(change, null));
  }

  get stopping(): boolean {
    return this.stoppingPromise !== null;
  }

  /** Resolves once every worker serves. */
  start(): Promise<void> {
    return Promise.all(this.slots.map((s) => this.fork(s))).then(() => {});
  }

  workerPids(): number[] {
    return this.slots.flatMap((s) => (s.worker?.pid === undefined ? [] : [s.worker.pid]));
  }

  killAll(): void {
    for (const s of this.slots) s.worker?.kill("SIGKILL");
  }

  shutdown(): Promise<void> {
    this.stoppingPromise ??= (async () => {
      this.log.info("shutting down: the workers finish their requests in flight");
      await new Promise<void>((resolve) => {
        this.onWorkerEnded = () => {
          if (this.slots.every((s) => s.worker === null)) resolve();
        };
        for (const s of this.slots) s.channel?.send({ t: "stop" });
        this.onWorkerEnded();
      });
      await this.store.close();
      this.log.info("stopped; database closed");
      this.settleStopped(this.gaveUp);
    })();
    return this.stoppingPromise;
  }

  private broadcast(change: StoreChange, from: Slot | null): void {
    for (const s of this.slots) if (s !== from && s.serving) s.channel?.send({ t: "change", change });
  }

  /** Starts a worker in `slot`; resolves once it serves, rejects if it ends (or fails) first. */
  private fork(slot: Slot): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const worker = platform.forkClusterWorker();
      worker.onError((e) => this.log.error(`worker ${nameOf(slot, worker)}'s channel: ${errorLine(e)}`));
      const channel = batchedChannel<ToWorker, ToPrimary>(worker, (fn) => platform.scheduleNextTurn(fn));
      Object.assign(slot, { worker, channel, startedAt: Date.now(), serving: false });
      channel.onMessage((m) => {
        if (slot.worker !== worker) return;
        if (m.t === "listening") {
          slot.serving = true;
          this.log.info(`worker ${nameOf(slot, worker)} of ${this.n} serving`);
          resolve();
        } else this.onMessage(slot, worker, channel, m);
      });
      worker.onExit((code, signal) => {
        const wasServing = slot.serving;
        this.ended(slot);
        const how = signal ?? `exit code ${code}`;
        if (!wasServing) reject(new Error(`worker ${slot.index + 1} of ${this.n} ended (${how}) before it served`));
        else if (!this.stopping) this.replace(slot, `worker ${nameOf(slot, worker)} of ${this.n} ended (${how})`);
      });
    });
  }

  private onMessage(slot: Slot, worker: ClusterWorker, channel: Channel<ToWorker, ToPrimary>, m: ToPrimary): void {
    if (m.t === "ready") {
      channel.send(this.stopping ? { t: "stop" } : { t: "start", port: this.port, name: nameOf(slot, worker) });
    } else if (m.t === "change") this.broadcast(m.change, slot);
    else if (m.t === "claim") {
      this.decide(slot, worker, channel, m.id, m.scope, m.fingerprint).catch((e: unknown) =>
        this.log.error(`idempotency claim failed: ${e instanceof Error ? e.message : String(e)}`),
      );
    } else if (m.t === "finish") {
      const finish = slot.running.get(m.id);
      slot.running.delete(m.id);
      finish?.(m.answer && answerFromWire(m.answer));
    } else if (m.t === "gather") this.gather(slot, worker, channel, m.id);
    else if (m.t === "collected") this.gatherings.get(m.id)?.(m.metrics);
  }

  /** A scrape at one worker: the other serving workers' metrics, as many as answer within the timeout. */
  private gather(from: Slot, worker: ClusterWorker, channel: Channel<ToWorker, ToPrimary>, id: number): void {
    const others = this.slots.filter((s) => s !== from && s.serving);
    const metrics: ProcessMetrics[] = [];
    const gatherId = ++this.lastGatherId;
    const done = () => {
      if (!this.gatherings.delete(gatherId)) return;
      clearTimeout(timer);
      if (from.worker === worker) channel.send({ t: "gathered", id, metrics });
    };
    const timer = setTimeout(done, GATHER_TIMEOUT_MS);
    this.gatherings.set(gatherId, (m) => {
      metrics.push(m);
      if (metrics.length === others.length) done();
    });
    for (const s of others) s.channel?.send({ t: "collect", id: gatherId });
    if (others.length === 0) done();
  }

  /** Decides a worker's claim with the cluster's cache, and tells the worker. */
  private async decide(
    slot: Slot,
    worker: ClusterWorker,
    channel: Channel<ToWorker, ToPrimary>,
    id: number,
    scope: string,
    fingerprint: string,
  ): Promise<void> {
    const claim = await this.answers.claim(scope, fingerprint);
    let wire: WireClaim;
    if (claim.kind === "run") {
      // The worker ended while the claim waited for another request with the same key.
      if (slot.worker !== worker) return claim.finish(null);
      slot.running.set(id, (answer) => claim.finish(answer));
      wire = { kind: "run" };
    } else wire = claim.kind === "replay" ? { kind: "replay", answer: answerToWire(claim.answer) } : { kind: "reused" };
    channel.send({ t: "claimed", id, claim: wire });
  }

  /** The worker in `slot` has ended: the requests it ran have no answer to remember (a retry elsewhere runs again). */
  private ended(slot: Slot): void {
    for (const finish of slot.running.values()) finish(null);
    slot.running.clear();
    slot.worker = null;
    slot.channel = null;
    slot.serving = false;
    if (this.stopping) this.onWorkerEnded();
  }

  /** Starts another worker in place of one that ended, waiting longer after each start that failed. */
  private replace(slot: Slot, what: string): void {
    slot.failedStarts = Date.now() - slot.startedAt < SHORT_LIFE_MS ? slot.failedStarts + 1 : 0;
    if (slot.failedStarts > MAX_FAILED_STARTS) {
      this.gaveUp = new Error(`worker ${slot.index + 1} of ${this.n} failed ${MAX_FAILED_STARTS} times in a row; stopping the store`);
      this.log.error(this.gaveUp.message);
      void this.shutdown();
      return;
    }
    const delayMs = slot.failedStarts === 0 ? 0 : Math.min(5_000, 100 * 2 ** slot.failedStarts);
    this.log.warning(`${what}; starting another`);
    setTimeout(() => {
      if (this.stopping) return;
      this.fork(slot).catch((e: unknown) => {
        if (!this.stopping)
          this.replace(slot, `worker ${slot.index + 1} of ${this.n} could not start: ${e instanceof Error ? e.message : String(e)}`);
      });
    }, delayMs);
  }
}

/** A worker as logs and its answers' `agl-worker` header name it: its place (from 1) and process id. */
const nameOf = (slot: Slot, worker: ClusterWorker): string => `${slot.index + 1} (pid ${worker.pid})`;

/** The port the workers listen on: the one asked for once it is known free, or a free one for port 0. */
async function portForWorkers(config: StoreServerConfig): Promise<number> {
  const at = { hostname: config.host, port: config.port, portSetting: "--port or AGL_SERVER_PORT" };
  if (config.port !== 0) {
    await checkPortFree(at);
    return config.port;
  }
  const probe = await serveFetch(() => new Response(null, { status: 503 }), at);
  await probe.stop(false);
  return probe.port;
}
