/**
 * Time in Lightning TS is float seconds since the Unix epoch, as upstream sends it.
 * Every component takes a `Clock` so tests can drive time by hand.
 */
export interface Clock {
  /** Seconds since the Unix epoch, with sub-millisecond resolution. */
  now(): number;
}

/**
 * The wall clock with sub-millisecond resolution that never returns the same value twice
 * (upstream's tests need `end_time > start_time` for calls made back to back).
 */
export class SystemClock implements Clock {
  private last = 0;
  now(): number {
    let t = (performance.timeOrigin + performance.now()) / 1000;
    // 1 µs steps keep values distinct at float64 precision around 1.8e9 s.
    if (t <= this.last) t = this.last + 1e-6;
    this.last = t;
    return t;
  }
}

/** A clock that only moves when told to: for tests and simulations. */
export class ManualClock implements Clock {
  constructor(private t = 1_000.0) {}
  now(): number {
    return this.t;
  }
  set(t: number): void {
    this.t = t;
  }
  advance(seconds: number): void {
    this.t += seconds;
  }
}

export const systemClock: Clock = new SystemClock();

/**
 * OTel timestamps may be nanoseconds; upstream normalises anything above 1e12 to seconds,
 * and treats 0 / null as "no timestamp".
 */
export function convertTimestamp(t: number | bigint | null | undefined): number | null {
  if (t === null || t === undefined) return null;
  if (typeof t === "bigint") {
    if (t === 0n) return null;
    return t > 1_000_000_000_000n ? Number(t) / 1e9 : Number(t);
  }
  if (t === 0 || Number.isNaN(t)) return null;
  return t > 1e12 ? t / 1e9 : t;
}
