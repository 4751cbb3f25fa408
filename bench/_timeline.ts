/**
 * Timing what overlapping callers do (many runners on one event loop): a clock shared with the store's
 * spans, and a proxy that records every method call of an object.
 */

/** [start, end] in seconds. */
export type Interval = readonly [number, number];

/** Seconds since the Unix epoch on the clock of the store's spans (performance.timeOrigin + performance.now()). */
export const epochSeconds = (): number => (performance.timeOrigin + performance.now()) / 1000;

/** Summed length of `intervals` (overlapping ones each in full). */
export const totalSeconds = (intervals: readonly Interval[]): number => intervals.reduce((s, [a, b]) => s + (b - a), 0);

/**
 * `target` with every method timed: `onCall(method, start, end)` when its promise settles (or when it
 * returns, for a synchronous one). Methods run with `target` as `this`, so the calls it makes on itself are
 * not counted again.
 */
export function timeMethods<T extends object>(target: T, onCall: (method: string, start: number, end: number) => void): T {
  const wrapped = new Map<PropertyKey, unknown>();
  return new Proxy(target, {
    get(t, prop) {
      const v: unknown = Reflect.get(t, prop, t);
      if (typeof v !== "function" || prop === "constructor" || typeof prop === "symbol") return v;
      let w = wrapped.get(prop);
      if (w === undefined) {
        const fn = v as (...args: unknown[]) => unknown;
        w = (...args: unknown[]) => {
          const start = epochSeconds();
          const out = fn.apply(t, args);
          if (out instanceof Promise) return out.finally(() => onCall(prop, start, epochSeconds()));
          onCall(prop, start, epochSeconds());
          return out;
        };
        wrapped.set(prop, w);
      }
      return w;
    },
  });
}
