/**
 * `Trainer`: wires an agent, an algorithm, a store, runners and an execution
 * strategy, then `fit()` (or `dev()` with the Baseline algorithm) runs them until the algorithm is done.
 *
 *   const trainer = new Trainer({ algorithm: new Baseline(), nRunners: 4, strategy: { type: "shm", main_thread: "algorithm" },
 *                                 initialResources: { prompt: { resource_type: "prompt_template", template: "...", engine: "f-string" } } });
 *   await trainer.fit(agent, trainData, { valDataset });
 *
 * Every component may be given as an instance, a class, a factory, a registered name or a
 * `{ type, ...options }` dict. Each worker gets its own runner (and tracer), built from the runner
 * spec or cloned from a given runner instance (docs/departures.md#17).
 */
import { TraceAdapter } from "../adapter/types.ts";
import { TraceTripletAdapter } from "../adapter/trace-triplet.ts";
import { LlmProxyTraceToTriplet } from "../adapter/proxy-triplet.ts";
import { TraceToMessages } from "../adapter/messages.ts";
import { Algorithm, FastAlgorithm, type Dataset, type LlmProxyLike } from "../algorithm/base.ts";
import { Baseline } from "../algorithm/baseline.ts";
import type { ExecutionEvent } from "../runner/event.ts";
import { Hook } from "../runner/hooks.ts";
import type { LitAgent } from "../runner/litagent.ts";
import { LitAgentRunner, Runner } from "../runner/runner.ts";
import type { LightningStore } from "../store/base.ts";
import { InMemoryLightningStore } from "../store/memory.ts";
import { DummyTracer, Tracer } from "../tracer/base.ts";
import { errorLine, getLogger } from "../platform/log.ts";
import { OtelTracer } from "../tracer/otel.ts";
import type { NamedResourcesInput } from "../types/index.ts";
import { ValidationError } from "../types/index.ts";
import { defaultUnresponsiveSeconds, relayWorkerHeartbeats } from "./heartbeat-relay.ts";
import { buildComponent, isClass, registerComponent, type ComponentSpec } from "./registry.ts";
import { withRolloutDefaults } from "./rollout-defaults.ts";
import { SharedMemoryExecutionStrategy } from "./shm.ts";
import { ExecutionStrategy } from "./strategy.ts";

const log = getLogger("agentlightning.trainer");

// Each under its class name written out too: a minifying bundler renames classes (a browser build).
registerComponent(
  SharedMemoryExecutionStrategy as never,
  "SharedMemoryExecutionStrategy",
  "shm",
  "agentlightning.SharedMemoryExecutionStrategy",
);
registerComponent(LitAgentRunner as never, "LitAgentRunner", "agentlightning.LitAgentRunner");
registerComponent(OtelTracer as never, "OtelTracer", "agentlightning.OtelTracer");
registerComponent(DummyTracer as never, "DummyTracer", "agentlightning.DummyTracer");
registerComponent(InMemoryLightningStore as never, "InMemoryLightningStore", "memory", "agentlightning.InMemoryLightningStore");
registerComponent(
  TraceTripletAdapter as never,
  "TraceTripletAdapter",
  "TracerTraceToTriplet",
  "agentlightning.TracerTraceToTriplet",
  "agentlightning.adapter.TracerTraceToTriplet",
);
registerComponent(
  LlmProxyTraceToTriplet as never,
  "LlmProxyTraceToTriplet",
  "agentlightning.LlmProxyTraceToTriplet",
  "agentlightning.adapter.LlmProxyTraceToTriplet",
);
registerComponent(TraceToMessages as never, "TraceToMessages", "agentlightning.TraceToMessages", "agentlightning.adapter.TraceToMessages");
registerComponent(Baseline as never, "Baseline", "agentlightning.Baseline", "agentlightning.algorithm.Baseline");

export interface TrainerOptions {
  /** Runners to start (default 1; a strategy that declares a positive count overrides it). */
  nRunners?: number | null;
  /** Rollouts each runner processes before it stops (null: until the algorithm is done). */
  maxRollouts?: number | null;
  /** Resources the algorithm publishes before the first rollout. */
  initialResources?: NamedResourcesInput | null;
  tracer?: ComponentSpec<Tracer>;
  adapter?: ComponentSpec<TraceAdapter<unknown>>;
  store?: LightningStore | string | null;
  runner?: ComponentSpec<Runner>;
  strategy?: ComponentSpec<ExecutionStrategy>;
  /** Server port for a client-server strategy. */
  port?: number | null;
  algorithm?: ComponentSpec<Algorithm>;
  llmProxy?: LlmProxyLike | null;
  hooks?: Hook | readonly Hook[] | null;
  /** Seconds between background watchdog scans of the store while `fit` runs (docs/departures.md#11; default 5, 0 disables). */
  watchdogIntervalSeconds?: number;
  /**
   * The `unresponsive_seconds` of rollouts the algorithm enqueues without one (docs/departures.md#21).
   * Default: when the runners send heartbeats, 6 heartbeat intervals and at least 30 s (60 s with the
   * default 10 s interval); otherwise none. `null`: none.
   */
  defaultUnresponsiveSeconds?: number | null;
}

const isStore = (v: unknown): v is LightningStore =>
  typeof v === "object" &&
  v !== null &&
  typeof (v as LightningStore).dequeueRollout === "function" &&
  typeof (v as LightningStore).addManySpans === "function";

export class Trainer {
  readonly tracer: Tracer;
  readonly adapter: TraceAdapter<unknown>;
  readonly algorithm: Algorithm | null;
  readonly initialResources: NamedResourcesInput | null;
  readonly port: number | null;
  readonly strategy: ExecutionStrategy;
  readonly store: LightningStore;
  readonly runner: Runner;
  readonly nRunners: number;
  readonly maxRollouts: number | null;
  readonly llmProxy: LlmProxyLike | null;
  readonly hooks: readonly Hook[];
  readonly watchdogIntervalSeconds: number;
  /** Seconds between runner heartbeats (null: runners send none), read from the runner. */
  readonly heartbeatInterval: number | null;
  /** What `defaultUnresponsiveSeconds` resolved to. */
  readonly defaultUnresponsiveSeconds: number | null;
  private readonly runnerSpec: ComponentSpec<Runner>;
  private readonly tracerSpec: ComponentSpec<Tracer>;

  constructor(o: TrainerOptions = {}) {
    const nRunners = o.nRunners ?? 1;
    this.maxRollouts = o.maxRollouts ?? null;
    this.tracerSpec = o.tracer;
    this.tracer = buildComponent(o.tracer, { expectedType: Tracer, specName: "tracer", defaultFactory: () => new OtelTracer() });
    this.adapter = buildComponent(o.adapter, {
      expectedType: TraceAdapter as never,
      specName: "adapter",
      defaultFactory: () => new TraceTripletAdapter(),
      dictRequiresType: false,
      dictDefaultCls: TraceTripletAdapter as never,
    });
    this.algorithm = buildComponent(o.algorithm, { expectedType: Algorithm as never, specName: "algorithm", allowNone: true });
    this.initialResources = o.initialResources ?? null;
    this.port = o.port ?? null;
    // Default: shared memory with the algorithm in front, so any nRunners works and nothing re-executes
    // the caller's script. Upstream defaults to client-server; ask for it with strategy "cs".
    this.strategy = this.buildStrategy(o.strategy ?? { type: "shm", main_thread: "algorithm" }, nRunners);
    this.store = this.buildStore(o.store);
    this.runnerSpec = o.runner;
    this.runner = this.buildRunner(this.tracer);
    const fromStrategy = this.strategy.nRunners;
    this.nRunners = typeof fromStrategy === "number" && fromStrategy > 0 ? fromStrategy : nRunners;
    this.llmProxy = o.llmProxy ?? null;
    this.hooks = !o.hooks ? [] : o.hooks instanceof Hook ? [o.hooks] : [...o.hooks];
    this.watchdogIntervalSeconds = o.watchdogIntervalSeconds ?? 5;
    const interval = this.runner instanceof LitAgentRunner ? this.runner.heartbeatInterval : null;
    this.heartbeatInterval = interval !== null && interval > 0 ? interval : null;
    const unresponsive =
      o.defaultUnresponsiveSeconds === undefined
        ? this.heartbeatInterval === null
          ? null
          : defaultUnresponsiveSeconds(this.heartbeatInterval)
        : o.defaultUnresponsiveSeconds;
    if (unresponsive !== null && !(typeof unresponsive === "number" && unresponsive > 0 && Number.isFinite(unresponsive))) {
      throw new ValidationError(`defaultUnresponsiveSeconds must be a positive number or null, got ${String(unresponsive)}`, [
        "defaultUnresponsiveSeconds",
      ]);
    }
    this.defaultUnresponsiveSeconds = unresponsive;
  }

  private buildStrategy(spec: ComponentSpec<ExecutionStrategy>, nRunners: number): ExecutionStrategy {
    const defaults: Record<string, unknown> = { nRunners };
    if (this.port !== null) defaults.serverPort = this.port;
    const strategy = buildComponent(spec, { expectedType: ExecutionStrategy as never, specName: "strategy", optionalDefaults: defaults });
    if (spec instanceof ExecutionStrategy && this.port !== null && "serverPort" in strategy) {
      (strategy as { serverPort: number }).serverPort = this.port;
    }
    return strategy;
  }

  private buildStore(spec: LightningStore | string | null | undefined): LightningStore {
    if (isStore(spec)) return spec;
    if (spec === null || spec === undefined) return new InMemoryLightningStore();
    const built = buildComponent(spec as never, { expectedType: Object as never, specName: "store" }) as unknown;
    if (!isStore(built)) throw new TypeError(`store spec built ${String(built)}, which is not a LightningStore`);
    return built;
  }

  private buildRunner(tracer: Tracer): Runner {
    const defaults: Record<string, unknown> = { tracer };
    if (this.maxRollouts !== null) defaults.maxRollouts = this.maxRollouts;
    return buildComponent(this.runnerSpec, {
      expectedType: Runner as never,
      specName: "runner",
      defaultFactory: () => new LitAgentRunner(defaults as never),
      optionalDefaults: defaults,
    });
  }

  /** Worker 0 uses the trainer's runner; others get a fresh one (built from the spec, or cloned). */
  private runnerFor(workerId: number): Runner {
    if (workerId === 0) return this.runner;
    const spec = this.runnerSpec;
    const fresh = (): Tracer =>
      this.tracerSpec instanceof Tracer || !this.tracerSpec
        ? this.tracer.clone()
        : buildComponent(this.tracerSpec, { expectedType: Tracer, specName: "tracer" });
    if (
      spec === null ||
      spec === undefined ||
      typeof spec === "string" ||
      isClass(spec) ||
      (typeof spec === "object" && Object.getPrototypeOf(spec) === Object.prototype)
    ) {
      return this.buildRunner(fresh());
    }
    if (typeof spec === "function") return buildComponent(spec, { expectedType: Runner as never, specName: "runner" });
    const cloneable = spec as Runner & { clone?: () => Runner };
    if (typeof cloneable.clone === "function") return cloneable.clone();
    throw new ValidationError(
      "A runner instance without clone() cannot serve several workers; pass a runner class, factory or dict instead",
      ["runner"],
    );
  }

  /** Trains `agent`: runs the strategy until the algorithm is done. */
  async fit<T>(agent: LitAgent<T>, trainDataset?: Dataset<T> | null, options: { valDataset?: Dataset<T> | null } = {}): Promise<void> {
    if (typeof trainDataset === "string") {
      throw new ValidationError("A dataset URL (the legacy fit_v0 path) is not supported; pass an array of tasks", ["trainDataset"]);
    }
    agent.setTrainer(this);
    await this.execute(agent, trainDataset ?? null, options.valDataset ?? null, this.algorithm);
  }

  /** Like fit, with `Baseline` unless a FastAlgorithm was configured: for developing agents. */
  async dev<T>(agent: LitAgent<T>, trainDataset?: Dataset<T> | null, options: { valDataset?: Dataset<T> | null } = {}): Promise<void> {
    const algorithm = this.algorithm ?? new Baseline();
    if (!(algorithm instanceof FastAlgorithm)) {
      throw new TypeError(
        "Trainer.dev() requires an algorithm that inherits from FastAlgorithm (such as Baseline); use fit() for other algorithms",
      );
    }
    agent.setTrainer(this);
    await this.execute(agent, trainDataset ?? null, options.valDataset ?? null, algorithm);
  }

  private async execute<T>(
    agent: LitAgent<T>,
    train: Dataset<T> | null,
    val: Dataset<T> | null,
    algorithm: Algorithm | null,
  ): Promise<void> {
    await this.strategy.execute(
      (store, event) => this.algorithmBundle(store, event, train, val, algorithm),
      (store, workerId, event, signal) => this.runnerBundle(store, workerId, event, signal, agent as LitAgent<unknown>),
      this.store,
    );
  }

  /**
   * Background work on the store while the algorithm runs, each at its own interval: worker heartbeats
   * relayed to the attempts they run (see heartbeat-relay.ts), and watchdog scans. When both are due the
   * relay goes first, so a scan does not judge an attempt whose runner has just sent a heartbeat.
   */
  private startBackgroundTasks(store: LightningStore): () => void {
    const watchdogStore = store as LightningStore & { runWatchdog?: () => Promise<number> };
    const watchdog = this.watchdogIntervalSeconds > 0 && typeof watchdogStore.runWatchdog === "function";
    const relay = this.heartbeatInterval !== null;
    if (!watchdog && !relay) return () => {};
    // Relaying twice per heartbeat keeps an attempt's heartbeat at most about 1.5 intervals old; each
    // task runs at its own interval, on one timer ticking at the shorter one.
    const relayEvery = relay ? this.heartbeatInterval! / 2 : Infinity;
    const scanEvery = watchdog ? this.watchdogIntervalSeconds : Infinity;
    const tick = Math.min(relayEvery, scanEvery);
    const now = () => performance.now() / 1000;
    let lastRelay = now();
    let lastScan = now();
    let busy = false;
    const timer = setInterval(() => {
      if (busy) return;
      busy = true;
      void (async () => {
        try {
          // Small slack: a tick that fires a little early still counts.
          if (now() - lastRelay >= relayEvery - tick / 2) {
            lastRelay = now();
            await relayWorkerHeartbeats(store).catch((err: unknown) => log.error("Relaying worker heartbeats to attempts failed", err));
          }
          if (now() - lastScan >= scanEvery - tick / 2) {
            lastScan = now();
            await watchdogStore.runWatchdog!().catch((err: unknown) => log.error("Background watchdog scan failed", err));
          }
        } finally {
          busy = false;
        }
      })();
    }, tick * 1000);
    return () => clearInterval(timer);
  }

  private async algorithmBundle(
    store: LightningStore,
    event: ExecutionEvent,
    train: Dataset<unknown> | null,
    val: Dataset<unknown> | null,
    algorithm: Algorithm | null,
  ): Promise<void> {
    const stopBackground = this.startBackgroundTasks(store);
    try {
      if (algorithm === null) {
        // No algorithm: rollouts come from elsewhere (an external algorithm, manual seeding); wait for stop.
        await event.wait();
        return;
      }
      algorithm.setTrainer(this);
      algorithm.setStore(
        this.defaultUnresponsiveSeconds === null
          ? store
          : withRolloutDefaults(store, { unresponsive_seconds: this.defaultUnresponsiveSeconds }),
      );
      algorithm.setAdapter(this.adapter);
      if (this.initialResources !== null) algorithm.setInitialResources(this.initialResources);
      if (this.llmProxy !== null) {
        this.llmProxy.setStore?.(store);
        algorithm.setLlmProxy(this.llmProxy);
      }
      await algorithm.run(train, val);
    } catch (err) {
      // One line; the error goes on to fit()'s caller, its stack at DEBUG.
      log.error(`Algorithm failed: ${errorLine(err)}`);
      log.debug("Algorithm failed", err);
      throw err;
    } finally {
      stopBackground();
    }
  }

  private async runnerBundle(
    store: LightningStore,
    workerId: number,
    event: ExecutionEvent,
    signal: AbortSignal,
    agent: LitAgent<unknown>,
  ): Promise<void> {
    const runner = this.runnerFor(workerId);
    let inited = false;
    let workerInited = false;
    try {
      await runner.init(agent, { hooks: this.hooks });
      inited = true;
      await runner.initWorker(workerId, store);
      workerInited = true;
      await runner.iter({ event, signal });
    } catch (err) {
      log.error(`Runner ${workerId} failed`, err);
      throw err;
    } finally {
      if (workerInited) {
        try {
          await runner.teardownWorker(workerId);
        } catch (err) {
          log.error(`Error during runner ${workerId} worker teardown`, err);
        }
      }
      if (inited) {
        try {
          await runner.teardown();
        } catch (err) {
          log.error(`Error during runner ${workerId} teardown`, err);
        }
      }
    }
  }
}
