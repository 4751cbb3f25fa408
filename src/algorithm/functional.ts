/**
 * `algo()` (docs/training.md#algorithms): a function becomes an Algorithm. The function takes one context object
 * and destructures what it needs:
 *
 *   const myAlgo = algo(async ({ store, trainDataset }) => { ... });
 *
 * Context keys are lazy (reading `store` before the trainer has set one throws, other keys do not).
 * A dataset given to `run` that the function does not take is an error; which keys it takes is read
 * from the destructuring pattern, or declared with `{ accepts }`.
 */
import type { LightningStore } from "../store/base.ts";
import type { NamedResourcesInput } from "../types/index.ts";
import { callableInstance } from "../runner/callable.ts";
import { Algorithm, type AdapterLike, type Dataset, type LlmProxyLike } from "./base.ts";

export interface AlgoContext {
  readonly store: LightningStore;
  readonly trainDataset: Dataset<unknown> | null;
  readonly valDataset: Dataset<unknown> | null;
  readonly llmProxy: LlmProxyLike | null;
  readonly adapter: AdapterLike | null;
  readonly initialResources: NamedResourcesInput | null;
}

export type AlgoFunction = (ctx: AlgoContext) => void | Promise<void>;

const SNAKE: Record<string, string> = {
  train_dataset: "trainDataset",
  val_dataset: "valDataset",
  llm_proxy: "llmProxy",
  initial_resources: "initialResources",
};

/** Keys of a destructured first parameter `({ a, b: c, d = 1 })`; null when it is not destructured. */
export function destructuredKeys(fn: (...args: never[]) => unknown): string[] | null {
  const src = Function.prototype.toString.call(fn);
  const open = src.indexOf("(");
  if (open < 0) return null;
  let i = open + 1;
  while (/\s/.test(src[i] ?? "")) i++;
  if (src[i] !== "{") return null;
  let depth = 0;
  let end = i;
  for (; end < src.length; end++) {
    if (src[end] === "{") depth++;
    else if (src[end] === "}" && --depth === 0) break;
  }
  const inner = src.slice(i + 1, end);
  const keys: string[] = [];
  let level = 0;
  let token = "";
  const flush = () => {
    const m = /^\s*(?:\.\.\.)?\s*([A-Za-z_$][\w$]*)/.exec(token);
    if (m) keys.push(SNAKE[m[1]!] ?? m[1]!);
    token = "";
  };
  for (const c of inner) {
    if (c === "{" || c === "[" || c === "(") level++;
    else if (c === "}" || c === "]" || c === ")") level--;
    if (c === "," && level === 0) flush();
    else token += c;
  }
  flush();
  return keys;
}

export interface FunctionalAlgorithm {
  (ctx: AlgoContext): void | Promise<void>;
}

export class FunctionalAlgorithm extends Algorithm {
  readonly fn: AlgoFunction;
  /** The context keys the function takes; null when unknown (then every dataset is allowed). */
  readonly accepts: string[] | null;

  constructor(fn: AlgoFunction, options: { accepts?: string[] } = {}) {
    super();
    this.fn = fn;
    this.accepts = options.accepts?.map((k) => SNAKE[k] ?? k) ?? destructuredKeys(fn);
    // Callable, passing straight through to the function.
    return callableInstance(this, new.target.prototype, fn as (...args: never[]) => unknown);
  }

  override isAsync(): boolean {
    return this.fn.constructor?.name === "AsyncFunction";
  }

  run(trainDataset?: Dataset<unknown> | null, valDataset?: Dataset<unknown> | null): void | Promise<void> {
    const train = trainDataset ?? null;
    const val = valDataset ?? null;
    if (this.accepts !== null) {
      if (train !== null && !this.accepts.includes("trainDataset")) {
        throw new TypeError(
          "train_dataset is provided but not supported by the algorithm function; destructure trainDataset or declare it in accepts",
        );
      }
      if (val !== null && !this.accepts.includes("valDataset")) {
        throw new TypeError(
          "val_dataset is provided but not supported by the algorithm function; destructure valDataset or declare it in accepts",
        );
      }
    }
    const self = this;
    const ctx: AlgoContext = {
      get store() {
        return self.getStore();
      },
      trainDataset: train,
      valDataset: val,
      get llmProxy() {
        return self.getLlmProxy();
      },
      get adapter() {
        return self.hasAdapter() ? self.getAdapter() : null;
      },
      get initialResources() {
        return self.getInitialResources();
      },
    };
    return this.fn(ctx);
  }
}

export function algo(fn: AlgoFunction, options: { accepts?: string[] } = {}): FunctionalAlgorithm {
  return new FunctionalAlgorithm(fn, options);
}
