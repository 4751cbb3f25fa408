/**
 * `Algorithm` (docs/training.md#algorithms): the training side. It gets the store (the one the execution strategy
 * hands it), the adapter, optional initial resources and LLM proxy, then `run(train, val)`.
 */
import type { LightningStore } from "../store/base.ts";
import { RuntimeError } from "../runner/errors.ts";
import type { NamedResourcesInput } from "../types/index.ts";

/** Anything with a length and integer indexing. */
export type Dataset<T> = ArrayLike<T>;

/** The LLM proxy as an algorithm sees it (the proxy itself lives in src/proxy). */
export interface LlmProxyLike {
  isRunning(): boolean;
  start(): Promise<void>;
  stop(): Promise<void>;
  setStore?(store: LightningStore): void;
}

/** The adapter as an algorithm sees it. */
export interface AdapterLike {
  adapt(source: never): unknown;
}

export abstract class Algorithm {
  private trainer: unknown = null;
  private llmProxy: LlmProxyLike | null = null;
  private adapter: AdapterLike | null = null;
  private store: LightningStore | null = null;
  private initialResources: NamedResourcesInput | null = null;

  /** True when `run` is declared async (API parity; callers always await). */
  isAsync(): boolean {
    return this.run.constructor?.name === "AsyncFunction";
  }

  setTrainer(trainer: unknown): void {
    this.trainer = trainer;
  }
  getTrainer(): unknown {
    if (this.trainer === null) throw new RuntimeError("Trainer has not been set for this agent.");
    return this.trainer;
  }

  setLlmProxy(proxy: LlmProxyLike | null): void {
    this.llmProxy = proxy;
  }
  getLlmProxy(): LlmProxyLike | null {
    return this.llmProxy;
  }

  setAdapter(adapter: AdapterLike | null): void {
    this.adapter = adapter;
  }
  getAdapter(): AdapterLike {
    if (this.adapter === null) throw new RuntimeError("Adapter has not been set for this algorithm.");
    return this.adapter;
  }
  hasAdapter(): boolean {
    return this.adapter !== null;
  }

  setStore(store: LightningStore): void {
    this.store = store;
  }
  getStore(): LightningStore {
    if (this.store === null) throw new RuntimeError("Store has not been set for this algorithm.");
    return this.store;
  }

  setInitialResources(resources: NamedResourcesInput | null): void {
    this.initialResources = resources;
  }
  getInitialResources(): NamedResourcesInput | null {
    return this.initialResources;
  }

  abstract run(trainDataset?: Dataset<unknown> | null, valDataset?: Dataset<unknown> | null): void | Promise<void>;
}

/** The only kind of algorithm `Trainer.dev` accepts: quick to run, for debugging agents. */
export abstract class FastAlgorithm extends Algorithm {}

/**
 * Runs `fn` with the proxy started if it exists and is not running (and stopped afterwards); a proxy
 * that was already running is left alone. `required` makes a missing proxy an error.
 */
export async function withLlmProxy<R>(
  algorithm: Algorithm,
  fn: (proxy: LlmProxyLike | null) => Promise<R>,
  options: { required?: boolean; autoStart?: boolean } = {},
): Promise<R> {
  const proxy = algorithm.getLlmProxy();
  if (options.required && proxy === null) throw new RuntimeError("An LLM proxy is required by this algorithm but none is set.");
  const start = (options.autoStart ?? true) && proxy !== null && !proxy.isRunning();
  if (start) await proxy.start();
  try {
    return await fn(proxy);
  } finally {
    if (start) await proxy.stop();
  }
}

function shuffled(n: number, random: () => number): number[] {
  const idx = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [idx[i], idx[j]] = [idx[j]!, idx[i]!];
  }
  return idx;
}

/**
 * Endless batches: the whole dataset reshuffled when `batchSize >= length`; otherwise batches of
 * exactly `batchSize` distinct items drawn epoch by epoch (a batch may straddle two epochs).
 */
export function* batchIterOverDataset<T>(dataset: Dataset<T>, batchSize: number, random: () => number = Math.random): Generator<T[]> {
  const n = dataset.length;
  if (n === 0) throw new RuntimeError("Cannot iterate over an empty dataset");
  if (batchSize >= n) {
    for (;;) yield shuffled(n, random).map((i) => dataset[i]!);
  }
  let batch: number[] = [];
  for (;;) {
    for (const i of shuffled(n, random)) {
      if (batch.includes(i)) continue;
      batch.push(i);
      if (batch.length === batchSize) {
        yield batch.map((k) => dataset[k]!);
        batch = [];
      }
    }
  }
}
