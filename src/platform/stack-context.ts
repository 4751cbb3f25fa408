/**
 * The OpenTelemetry context manager of runtimes without async context (browsers): the active context
 * follows synchronous calls only, as OpenTelemetry's own stack context manager for the web does. Inside
 * `with(ctx, fn)` the context is `ctx` until `fn` returns; code that runs later (after an `await`, in a
 * timer) sees the root context again unless it was bound (`bind`) or is handed its context explicitly.
 * The runner hands an agent its rollout's context that way (docs/browser.md#tracing-without-async-context).
 */
import { type Context, type ContextManager, ROOT_CONTEXT } from "@opentelemetry/api";

export class StackContextManager implements ContextManager {
  private current: Context = ROOT_CONTEXT;

  active(): Context {
    return this.current;
  }

  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(
    context: Context | null,
    fn: F,
    thisArg?: ThisParameterType<F>,
    ...args: A
  ): ReturnType<F> {
    const previous = this.current;
    this.current = context ?? ROOT_CONTEXT;
    try {
      return fn.call(thisArg, ...args);
    } finally {
      this.current = previous;
    }
  }

  /** A function that runs in `context` whenever it is called; anything else is returned as it is. */
  bind<T>(context: Context, target: T): T {
    if (typeof target !== "function") return target;
    const manager = this;
    const fn = target as unknown as (...args: unknown[]) => unknown;
    return function (this: unknown, ...args: unknown[]) {
      return manager.with(context, () => fn.apply(this, args));
    } as unknown as T;
  }

  enable(): this {
    this.current = ROOT_CONTEXT;
    return this;
  }

  disable(): this {
    this.current = ROOT_CONTEXT;
    return this;
  }
}
