/**
 * Gathers the calls made while the server handles one batch of socket events and issues them together
 * in a single macrotask. A store with group commit (libSQL) writes the calls that queue up in the same
 * tick as one transaction; requests arriving over HTTP are otherwise handled in separate ticks and would
 * each commit alone. Every caller still gets its own result or error.
 */
import { scheduleNextTurn } from "../store/next-turn.ts";

type Schedule = (fn: () => void) => void;

export function coalesced<A extends unknown[], R>(
  fn: (...args: A) => Promise<R>,
  schedule: Schedule = scheduleNextTurn,
): (...args: A) => Promise<R> {
  let pending: { args: A; resolve: (v: R) => void; reject: (e: unknown) => void }[] = [];
  const flush = () => {
    const batch = pending;
    pending = [];
    for (const call of batch) {
      let out: Promise<R>;
      try {
        out = fn(...call.args);
      } catch (e) {
        call.reject(e);
        continue;
      }
      out.then(call.resolve, call.reject);
    }
  };
  return (...args: A) =>
    new Promise<R>((resolve, reject) => {
      if (pending.length === 0) schedule(flush);
      pending.push({ args, resolve, reject });
    });
}

/**
 * A store whose method calls are all issued through one `coalesced` queue: the calls of concurrent
 * requests reach the store together, in arrival order, so a group-committing store (libSQL) shares one
 * commit among their writes. Results, errors and per-caller order are unchanged.
 */
export function coalescedStore<S extends object>(store: S): S {
  const issue = coalesced((call: () => Promise<unknown>) => call());
  const methods = new Map<PropertyKey, unknown>();
  return new Proxy(store, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target) as unknown;
      if (typeof value !== "function" || prop === "constructor") return value;
      let m = methods.get(prop);
      if (!m) {
        m = (...args: unknown[]) =>
          issue(() => (Reflect.get(target, prop, target) as (...a: unknown[]) => Promise<unknown>).apply(target, args));
        methods.set(prop, m);
      }
      return m;
    },
  });
}
