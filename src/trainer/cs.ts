/**
 * `ClientServerExecutionStrategy` (alias `cs`; docs/trainer-reliability.md): the algorithm side serves the store
 * over HTTP; runners are separate processes that talk to it through `LightningStoreClient`.
 *
 * Runner processes are started by re-running this process's entry script (the way Python's "spawn"
 * start method re-imports `__main__`) with `AGL_CURRENT_ROLE=runner`, `AGL_WORKER_ID=<i>`,
 * `AGL_SERVER_HOST` and `AGL_SERVER_PORT` set: the script builds the same Trainer, whose strategy then
 * runs exactly that one runner against the server. So everything before `fit()` runs again in each
 * child, and `fit()` returns there when the runner stops. `childCommand` replaces the command line.
 *
 * Stopping escalates so no runner lingers: a stop line on the child's stdin (a child whose stdin
 * closes stops too, so runners never outlive a dead parent), then SIGINT, SIGTERM and SIGKILL, each
 * after a timeout.
 *
 * A runner child that exits before it was asked to (a crash, `kill -9`) is noticed at once: its
 * worker's in-flight attempts are marked failed through the store, so each rollout is retried or fails
 * per its config rather than staying `running` (docs/departures.md#21), and the runner is started
 * again, up to `maxRunnerRestarts` times per runner. When every runner is gone for good, the run stops
 * with an error instead of waiting for rollouts nobody will run.
 */
import { LightningStoreClient } from "../client/client.ts";
import { LocalEvent, type ExecutionEvent } from "../runner/event.ts";
import { RuntimeError } from "../runner/errors.ts";
import { workerLabel } from "../runner/runner.ts";
import { createStoreApp } from "../server/app.ts";
import type { LightningStore } from "../store/base.ts";
import { getLogger } from "../platform/log.ts";
import { ValidationError } from "../types/index.ts";
import { readEnv, resolveBoolEnv, resolveIntEnv, resolveStrEnv } from "../types/env.ts";
import { failInFlightAttempts } from "./in-flight.ts";
import { onInterrupt } from "./interrupt.ts";
import { runnerFetch } from "./runner-fetch.ts";
import { registerComponent } from "./registry.ts";
import { serveFetch, type ServedApp } from "../platform/index.ts";
import { ChildHandle, listenForParentStop, selfCommand } from "./spawn.ts";
import { ExecutionStrategy, runUntilCompletedOrCanceled, type AlgorithmBundle, type RunnerBundle } from "./strategy.ts";

const log = getLogger("agentlightning.execution.client_server");

export type Role = "algorithm" | "runner" | "both";

export interface ClientServerOptions {
  role?: Role | null;
  serverHost?: string | null;
  /** 0 picks a free port (the runners are told the real one). */
  serverPort?: number | null;
  nRunners?: number;
  /** Seconds runners get to stop by themselves after the stop line (default 10). */
  gracefulTimeout?: number;
  /** Seconds after each signal (SIGINT, SIGTERM, SIGKILL) before the next (default 10). */
  terminateTimeout?: number;
  mainProcess?: "algorithm" | "runner";
  managedStore?: boolean | null;
  /** Exit codes that count as a clean runner exit (default 0 and -15, death by SIGTERM). */
  allowedExitCodes?: readonly number[];
  /** The command that starts a child (default: this process's runtime and entry script again). */
  childCommand?: readonly string[] | null;
  /** Seconds a bundle gets after stop before it is aborted (default 5). */
  gracefulDelay?: number;
  /**
   * How much lower the runner processes' CPU priority is than this process's: added to their nice value
   * (0 to 19; default 10, env `AGL_RUNNER_NICENESS`). The server's event loop is what every runner waits
   * on; when runners and server share the cores, the scheduler then gives the server its turn first.
   */
  runnerNiceness?: number | null;
  /**
   * How many times each runner child that exits unasked with a non-zero code (a crash, a kill) is
   * started again (default 3; 0: never). Its in-flight attempts are failed first either way.
   */
  maxRunnerRestarts?: number;
}

const bindable = (host: string): string => (host === "localhost" ? "127.0.0.1" : host);

export class ClientServerExecutionStrategy extends ExecutionStrategy {
  static readonly acceptedOptions = [
    "role",
    "serverHost",
    "serverPort",
    "nRunners",
    "gracefulTimeout",
    "terminateTimeout",
    "mainProcess",
    "managedStore",
    "allowedExitCodes",
    "childCommand",
    "gracefulDelay",
    "runnerNiceness",
    "maxRunnerRestarts",
  ] as const;

  role: Role;
  serverHost: string;
  serverPort: number;
  override nRunners: number;
  readonly gracefulTimeout: number;
  readonly terminateTimeout: number;
  readonly mainProcess: "algorithm" | "runner";
  readonly managedStore: boolean;
  readonly allowedExitCodes: readonly number[];
  readonly childCommand: readonly string[] | null;
  readonly gracefulDelay: number;
  readonly runnerNiceness: number;
  readonly maxRunnerRestarts: number;
  /** The port the server really bound (after `execute` started it). */
  boundPort: number | null = null;
  /** The child processes of the last `execute` (for inspection), restarted runners included. */
  children: ChildHandle[] = [];
  /** Runner restarts of the last `execute`, per worker index. */
  restarts = new Map<number, number>();
  /** Set when this strategy starts stopping its children: exits after that were asked for. */
  private stopping = false;
  /** The current child of each runner slot (worker index). */
  private runnerSlots: ChildHandle[] = [];
  /** Crashed runners that were replaced: their exit codes are not held against the run. */
  private replaced = new Set<ChildHandle>();
  /** Exit handlers still running (failing attempts, restarting), and how many have not decided yet. */
  private exitHandlers = new Set<Promise<void>>();
  private undecidedExits = 0;
  /** Set when every runner is gone for good before the run ended. */
  private runnersGone: RuntimeError | null = null;

  constructor(o: ClientServerOptions = {}) {
    super();
    this.role = resolveStrEnv("AGL_CURRENT_ROLE", o.role, "both") as Role;
    if (!["algorithm", "runner", "both"].includes(this.role)) {
      throw new ValidationError(`role must be 'algorithm', 'runner' or 'both', got '${this.role}'`, ["role"]);
    }
    this.serverHost = resolveStrEnv("AGL_SERVER_HOST", o.serverHost, "localhost");
    this.serverPort = resolveIntEnv("AGL_SERVER_PORT", o.serverPort, 4747);
    this.nRunners = o.nRunners ?? 1;
    this.gracefulTimeout = o.gracefulTimeout ?? 10.0;
    this.terminateTimeout = o.terminateTimeout ?? 10.0;
    // A child this strategy started with AGL_CURRENT_ROLE re-runs the same script, whose options may say
    // mainProcess "runner": that choice was the parent's, so a role from the environment overrides it.
    const roleFromEnv = (o.role === null || o.role === undefined) && readEnv("AGL_CURRENT_ROLE") !== undefined;
    this.mainProcess = roleFromEnv && this.role !== "both" ? "algorithm" : (o.mainProcess ?? "algorithm");
    this.managedStore = resolveBoolEnv("AGL_MANAGED_STORE", o.managedStore, true);
    this.allowedExitCodes = o.allowedExitCodes ?? [0, -15];
    this.childCommand = o.childCommand ?? null;
    this.gracefulDelay = o.gracefulDelay ?? 5.0;
    this.runnerNiceness = resolveIntEnv("AGL_RUNNER_NICENESS", o.runnerNiceness, 10);
    this.maxRunnerRestarts = o.maxRunnerRestarts ?? 3;
    if (!(Number.isInteger(this.maxRunnerRestarts) && this.maxRunnerRestarts >= 0)) {
      throw new ValidationError(`maxRunnerRestarts must be an integer >= 0, got ${String(this.maxRunnerRestarts)}`, ["maxRunnerRestarts"]);
    }
    if (!(Number.isInteger(this.runnerNiceness) && this.runnerNiceness >= 0 && this.runnerNiceness <= 19)) {
      throw new ValidationError(`runnerNiceness must be an integer from 0 to 19, got ${String(this.runnerNiceness)}`, ["runnerNiceness"]);
    }
    if (this.mainProcess !== "algorithm" && this.mainProcess !== "runner") {
      throw new ValidationError(`mainProcess must be 'algorithm' or 'runner', got '${String(this.mainProcess)}'`, ["mainProcess"]);
    }
    if (this.mainProcess === "runner" && this.role !== "both")
      throw new ValidationError("main_process='runner' requires role='both'", ["mainProcess"]);
    if (this.mainProcess === "runner" && this.nRunners !== 1)
      throw new ValidationError("main_process='runner' requires n_runners to be 1", ["nRunners"]);
    // The algorithm then lives in a child process: this process must know its port in advance.
    if (this.mainProcess === "runner" && this.serverPort === 0)
      throw new ValidationError("main_process='runner' needs a fixed server port, not 0", ["serverPort"]);
    if (!(Number.isInteger(this.nRunners) && this.nRunners >= 1))
      throw new ValidationError("nRunners must be an integer >= 1", ["nRunners"]);
  }

  private address(port: number): string {
    return `http://${bindable(this.serverHost)}:${port}`;
  }

  override async execute(algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore): Promise<void> {
    const event = new LocalEvent();
    this.children = [];
    this.restarts = new Map();
    this.stopping = false;
    this.runnerSlots = [];
    this.replaced = new Set();
    this.exitHandlers = new Set();
    this.undecidedExits = 0;
    this.runnersGone = null;
    let recoveryClient: LightningStoreClient | null = null;
    let failure: unknown;
    let interrupted = false;
    const stopInterrupt = onInterrupt(() => {
      interrupted = true;
      event.set();
    });
    try {
      const childWorker = readEnv("AGL_WORKER_ID");
      if (this.role === "runner" && childWorker !== undefined) {
        // A child started by a parent strategy: the address the parent gives wins over the script's own
        // options (the script asked for port 0, say, and the parent bound a real one).
        this.serverHost = readEnv("AGL_SERVER_HOST") ?? this.serverHost;
        this.serverPort = resolveIntEnv("AGL_SERVER_PORT", null, this.serverPort);
        await this.runnerChild(runner, Number.parseInt(childWorker, 10), store, event);
      } else if (this.role === "algorithm") {
        await this.executeAlgorithm(algorithm, store, event);
      } else if (this.role === "runner") {
        if (this.nRunners === 1) await this.executeRunner(runner, 0, store, event);
        else {
          // The server is elsewhere: attempts of a runner that died are failed through a client.
          // One try per call: a server that is gone must not hold up stopping (a failure is logged).
          if (this.managedStore)
            recoveryClient = new LightningStoreClient(this.address(this.serverPort), { retryDelays: [], healthRetryDelays: [] });
          this.spawnRunners(this.serverPort, recoveryClient ?? store, event);
          // Runs until interrupted or every runner has gone.
          await event.wait();
        }
      } else if (this.mainProcess === "algorithm") {
        // Runners are stopped before the server goes away, so none sees the server vanish mid-poll.
        await this.executeAlgorithm(
          algorithm,
          store,
          event,
          (port) => this.spawnRunners(port, store, event),
          () => this.shutdownProcesses(this.children, event),
        );
      } else {
        const child = this.spawnChild("algorithm", { AGL_CURRENT_ROLE: "algorithm", AGL_SERVER_PORT: String(this.serverPort) });
        // The algorithm process ending is the stop signal for the runner here.
        void child.exited.then(() => event.set());
        await this.waitForServer(this.serverPort, event);
        await this.executeRunner(runner, 0, store, event);
        await child.exited;
      }
    } catch (err) {
      event.set();
      failure = err;
    } finally {
      stopInterrupt();
      await this.shutdownProcesses(this.children, event);
      await recoveryClient?.close();
    }
    if (failure === undefined && this.runnersGone !== null) failure = this.runnersGone;
    try {
      this.checkExitCodes(this.children.filter((c) => !this.replaced.has(c)));
    } catch (err) {
      if (failure !== undefined || interrupted) log.warn(String((err as Error).message));
      else throw err;
    }
    if (failure !== undefined) throw failure;
  }

  private spawnChild(name: string, env: Record<string, string>, niceness = 0): ChildHandle {
    const command = this.childCommand ?? selfCommand();
    const childEnv = { AGL_SERVER_HOST: this.serverHost, AGL_MANAGED_STORE: this.managedStore ? "true" : "false", ...env };
    const child = new ChildHandle(name, command, childEnv, niceness);
    this.children.push(child);
    log.info(`Started ${name} (pid ${child.pid})`);
    return child;
  }

  /** Starts the runner children; `store` is where the attempts of one that dies are failed. */
  private spawnRunners(port: number, store: LightningStore, event: LocalEvent): void {
    for (let i = 0; i < this.nRunners; i++) this.startRunner(i, port, store, event);
  }

  private startRunner(i: number, port: number, store: LightningStore, event: LocalEvent): void {
    const child = this.spawnChild(
      `runner-${i}`,
      { AGL_CURRENT_ROLE: "runner", AGL_WORKER_ID: String(i), AGL_SERVER_PORT: String(port) },
      this.runnerNiceness,
    );
    this.runnerSlots[i] = child;
    void child.exited.then((code) => {
      if (this.stopping) return;
      this.undecidedExits++;
      const handler = this.onRunnerExit(child, i, code, port, store, event).catch((err: unknown) => {
        log.error(`Handling the exit of ${child.name} failed`, err);
      });
      this.exitHandlers.add(handler);
      void handler.finally(() => this.exitHandlers.delete(handler));
    });
  }

  /**
   * A runner child exited before it was asked to: fail its worker's in-flight attempts, then start it
   * again if it crashed (non-zero code) and restarts are left. Exit code 0 is a runner that stopped by
   * itself (its `maxRollouts` reached): nothing to restart.
   */
  private async onRunnerExit(
    child: ChildHandle,
    i: number,
    code: number,
    port: number,
    store: LightningStore,
    event: LocalEvent,
  ): Promise<void> {
    const label = workerLabel(i);
    if (code !== 0) log.error(`${child.name} (pid ${child.pid}) exited unexpectedly with exit code ${code}`);
    try {
      const failed = await failInFlightAttempts(store, label);
      for (const a of failed) log.warn(`Marked attempt ${a.attempt_id} of rollout ${a.rollout_id} failed: ${label}'s process exited`);
    } catch (err) {
      log.error(`Could not fail the in-flight attempts of ${label} after its process exited`, err);
    } finally {
      this.undecidedExits--;
    }
    // From here on nothing awaits, so two exits never decide at the same time.
    if (this.stopping || event.isSet()) return;
    const used = this.restarts.get(i) ?? 0;
    if (code !== 0 && used < this.maxRunnerRestarts) {
      this.restarts.set(i, used + 1);
      this.replaced.add(child);
      log.warn(`Restarting ${child.name} (restart ${used + 1} of at most ${this.maxRunnerRestarts})`);
      this.startRunner(i, port, store, event);
      return;
    }
    // Another exit not decided yet may still restart its runner: the last one decides.
    if (this.runnerSlots.some((c) => c.alive) || this.undecidedExits > 0) return;
    if (this.role === "runner") {
      event.set();
      return;
    }
    const crashed = this.runnerSlots.filter((c) => c.exitCode !== 0);
    if (crashed.length === 0) return;
    this.runnersGone = new RuntimeError(
      `Every runner process has exited (${crashed.map((c) => `${c.name} exitcode=${c.exitCode}`).join(", ")}) and none is restarted ` +
        `(maxRunnerRestarts=${this.maxRunnerRestarts}); stopping the run`,
    );
    log.error(this.runnersGone.message);
    event.set();
  }

  private async waitForServer(port: number, event: ExecutionEvent): Promise<void> {
    const client = new LightningStoreClient(this.address(port), { retryDelays: [], healthRetryDelays: [] });
    try {
      for (let i = 0; i < 600 && !event.isSet(); i++) {
        if (await client.health()) return;
        await event.wait(0.1);
      }
    } finally {
      await client.close();
    }
  }

  /** The algorithm side: serve the store (managed), run the algorithm, stop serving. */
  private async executeAlgorithm(
    algorithm: AlgorithmBundle,
    store: LightningStore,
    event: ExecutionEvent,
    onServing?: (port: number) => void,
    beforeServerStop?: () => Promise<void>,
  ): Promise<void> {
    let served: ServedApp | null = null;
    const shutdown = new AbortController();
    try {
      if (this.managedStore) {
        const hostname = bindable(this.serverHost);
        // The bind address decides the Host check of a server without a token (src/server/browser-guard.ts).
        const app = createStoreApp(store, { shutdownSignal: shutdown.signal, bindAddress: hostname });
        // Its clients are this trainer's runners, usually all on this host (one address): no per-address limit.
        served = await serveFetch(app.fetch, {
          hostname,
          port: this.serverPort,
          limits: { maxConnectionsPerAddress: 0 },
          portSetting: "AGL_SERVER_PORT or the strategy's server_port",
        });
        this.boundPort = served.port;
        log.info(`Store server listening on ${this.address(served.port)}`);
      }
      onServing?.(served?.port ?? this.serverPort);
      await runUntilCompletedOrCanceled("algorithm", (signal) => algorithm(store, event, signal), event, this.gracefulDelay);
    } catch (err) {
      event.set();
      throw err;
    } finally {
      event.set();
      await beforeServerStop?.();
      if (served) {
        shutdown.abort();
        await served.stop().catch((err: unknown) => log.error("Error while stopping the store server", err));
      }
    }
  }

  /** A runner in this process: through a client to the server (managed), or on `store` as given. */
  private async executeRunner(runner: RunnerBundle, workerId: number, store: LightningStore, event: ExecutionEvent): Promise<void> {
    const client = this.managedStore ? new LightningStoreClient(this.address(this.serverPort), { fetch: runnerFetch() }) : null;
    try {
      await runUntilCompletedOrCanceled(
        `runner-${workerId}`,
        (signal) => runner(client ?? store, workerId, event, signal),
        event,
        this.gracefulDelay,
      );
    } catch (err) {
      event.set();
      throw err;
    } finally {
      await client?.close().catch((err: unknown) => log.error("Error while closing the store client", err));
    }
  }

  /** Inside a runner child: run worker `id` until the parent says stop (stdin) or SIGINT arrives. */
  private async runnerChild(runner: RunnerBundle, id: number, store: LightningStore, event: LocalEvent): Promise<void> {
    if (!Number.isInteger(id) || id < 0)
      throw new ValidationError(`AGL_WORKER_ID must be a worker index, got '${readEnv("AGL_WORKER_ID")}'`, ["AGL_WORKER_ID"]);
    const release = listenForParentStop(() => event.set());
    try {
      await this.executeRunner(runner, id, store, event);
    } finally {
      release();
    }
  }

  /** Stop line, then SIGINT, SIGTERM and SIGKILL, each step only for the children still alive. */
  private async shutdownProcesses(children: ChildHandle[], event: ExecutionEvent): Promise<void> {
    this.stopping = true;
    // Exit handlers under way finish first (they restart nothing once stopping is set).
    await Promise.all(this.exitHandlers);
    if (children.length === 0) return;
    event.set();
    for (const c of children) c.requestStop();
    const deadline = performance.now() / 1000 + this.gracefulTimeout;
    for (const c of children) await c.waitExit(Math.max(0, deadline - performance.now() / 1000));
    for (const sig of ["SIGINT", "SIGTERM", "SIGKILL"] as const) {
      const alive = children.filter((c) => c.alive);
      if (alive.length === 0) return;
      log.warn(`Sending ${sig} to ${alive.map((c) => `${c.name} (pid ${c.pid})`).join(", ")}`);
      for (const c of alive) {
        try {
          c.signal(sig);
        } catch (err) {
          log.warn(`Failed to send ${sig} to ${c.name}`, err);
        }
      }
      await Promise.all(alive.map((c) => c.waitExit(this.terminateTimeout)));
    }
    const survivors = children.filter((c) => c.alive);
    if (survivors.length > 0) log.error(`Processes still alive after SIGKILL: ${survivors.map((c) => c.name).join(", ")}`);
  }

  private checkExitCodes(children: ChildHandle[]): void {
    const bad = children.filter((c) => c.exitCode !== null && !this.allowedExitCodes.includes(c.exitCode));
    if (bad.length > 0) {
      throw new RuntimeError(
        `Subprocesses failed with unexpected exit codes: ${bad.map((c) => `${c.name} (exitcode=${c.exitCode})`).join(", ")}`,
      );
    }
  }
}

registerComponent(ClientServerExecutionStrategy as never, "cs", "agentlightning.ClientServerExecutionStrategy");
