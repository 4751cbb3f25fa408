/**
 * A worker of `agl store --workers N`: the one-process server (run.ts) on the cluster's port, with what
 * the processes must share going through the primary: the answers of idempotent writes (a retry that
 * reaches another worker gets the first answer), and the changes that wake waits (a wait held here
 * wakes as soon as another worker finishes its rollout). The primary runs the one watchdog timer.
 */
import type { ClusterPrimary } from "../../platform/index.ts";
import { platform } from "../../platform/index.ts";
import type { LogWriter } from "../../platform/log.ts";
import type { LightningStoreCore } from "../../store/core.ts";
import type { StoreServerConfig } from "../config.ts";
import type { IdempotencyBackend, IdempotencyClaim } from "../idempotency.ts";
import type { MetricsPeers, ProcessMetrics } from "../metrics.ts";
import { type RunningStoreServer, type ServerHost, startStoreServer } from "../run.ts";
import { type ToPrimary, type ToWorker, type WireClaim, answerFromWire, answerToWire, batchedChannel } from "./protocol.ts";

/** Idempotent answers kept by the primary: each request with a key asks it first, and tells it the answer. */
class PrimaryIdempotency implements IdempotencyBackend {
  private lastId = 0;
  private readonly waiting = new Map<number, { resolve(c: IdempotencyClaim): void; reject(e: unknown): void }>();

  constructor(
    private readonly send: (m: ToPrimary) => void,
    readonly maxBytes: number,
  ) {}

  claim(scope: string, fingerprint: string): Promise<IdempotencyClaim> {
    const id = ++this.lastId;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.send({ t: "claim", id, scope, fingerprint });
    });
  }

  /** The primary's decision on claim `id`. */
  decided(id: number, claim: WireClaim): void {
    const w = this.waiting.get(id);
    if (!w) return;
    this.waiting.delete(id);
    if (claim.kind === "replay") w.resolve({ kind: "replay", answer: answerFromWire(claim.answer) });
    else if (claim.kind === "reused") w.resolve({ kind: "reused" });
    else w.resolve({ kind: "run", finish: (answer) => this.send({ t: "finish", id, answer: answer && answerToWire(answer) }) });
  }

  /** The primary has gone: no claim waiting for it will be decided. */
  failAll(reason: Error): void {
    for (const w of this.waiting.values()) w.reject(reason);
    this.waiting.clear();
  }
}

/** The other workers' metrics, through the primary: a scrape of this worker adds them up with its own. */
class PrimaryMetricsPeers implements MetricsPeers {
  private lastId = 0;
  private readonly waiting = new Map<number, (metrics: ProcessMetrics[]) => void>();
  private snapshot: (() => ProcessMetrics) | null = null;

  constructor(private readonly send: (m: ToPrimary) => void) {}

  serve(snapshot: () => ProcessMetrics): void {
    this.snapshot = snapshot;
  }

  gather(): Promise<ProcessMetrics[]> {
    const id = ++this.lastId;
    return new Promise((resolve) => {
      this.waiting.set(id, resolve);
      this.send({ t: "gather", id });
    });
  }

  /** The primary asks for this worker's metrics. */
  collect(id: number): void {
    if (this.snapshot) this.send({ t: "collected", id, metrics: this.snapshot() });
  }

  gathered(id: number, metrics: ProcessMetrics[]): void {
    this.waiting.get(id)?.(metrics);
    this.waiting.delete(id);
  }

  /** The primary has gone: a scrape shows this worker's metrics alone. */
  endAll(): void {
    for (const resolve of this.waiting.values()) resolve([]);
    this.waiting.clear();
  }
}

/** Serves as a worker of the primary at the other end of `channel`; resolves once serving. */
export async function serveAsWorker(
  config: StoreServerConfig,
  host: ServerHost,
  channel: ClusterPrimary,
  log: LogWriter,
): Promise<{ stopped: Promise<void> }> {
  const primary = batchedChannel<ToPrimary, ToWorker>(channel, (fn) => platform.scheduleNextTurn(fn));
  const send = (m: ToPrimary) => primary.send(m);
  const idempotency = new PrimaryIdempotency(send, config.idempotency.maxBytes);
  const metricsPeers = new PrimaryMetricsPeers(send);
  let store: LightningStoreCore | null = null;
  let server: RunningStoreServer | null = null;
  let stopAsked = false;
  let started!: (start: { port: number; name: string } | null) => void;
  const start = new Promise<{ port: number; name: string } | null>((resolve) => (started = resolve));
  const stop = () => {
    stopAsked = true;
    // Asked to stop before it started: it never serves.
    started(null);
    server?.shutdown().catch((e: unknown) => log.error(`shutdown failed: ${e instanceof Error ? e.message : String(e)}`));
  };
  primary.onMessage((m) => {
    if (m.t === "start") started(m);
    else if (m.t === "change") store?.wake(m.change);
    else if (m.t === "claimed") idempotency.decided(m.id, m.claim);
    else if (m.t === "collect") metricsPeers.collect(m.id);
    else if (m.t === "gathered") metricsPeers.gathered(m.id, m.metrics);
    else if (m.t === "stop") stop();
  });
  channel.onDisconnect(() => {
    idempotency.failAll(new Error("the primary process of the store has ended"));
    metricsPeers.endAll();
    stop();
  });
  // Listening for "start" now: the primary sends it on this.
  send({ t: "ready" });
  const asked = await start;
  if (asked === null) return { stopped: Promise.resolve() };
  const { port, name } = asked;
  // A failure to start is this process's error (printed by the CLI); the primary sees it end.
  server = await startStoreServer({ ...config, port }, host, log, {
    name,
    threads: channel.canStartThreads,
    idempotency,
    metricsPeers,
    attach(s) {
      store = s;
      // The changes committed here, for the other workers' waits.
      s.onChange((change) => send({ t: "change", change }));
    },
  });
  send({ t: "listening" });
  if (stopAsked) stop();
  return server;
}
