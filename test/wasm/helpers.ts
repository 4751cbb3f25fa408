/** Comparison helpers for the kernel property tests (random inputs live in random.ts). */
import { expect } from "vitest";

export * from "./random.ts";

/** Floats within 1e-6 relative (plus 1e-9 absolute at the cancellation floor, where a value is ~0). */
export function expectClose(actual: ArrayLike<number>, expected: ArrayLike<number>, what = ""): void {
  expect(actual.length, `${what} length`).toBe(expected.length);
  for (let k = 0; k < expected.length; k++) {
    const a = actual[k],
      e = expected[k];
    if (Number.isNaN(e)) {
      expect(Number.isNaN(a), `${what}[${k}] NaN`).toBe(true);
      continue;
    }
    const tol = 1e-6 * Math.max(Math.abs(a), Math.abs(e)) + 1e-9;
    if (!(Math.abs(a - e) <= tol)) expect.fail(`${what}[${k}]: ${a} vs ${e}`);
  }
}

export function expectEqualInts(actual: ArrayLike<number>, expected: ArrayLike<number>, what = ""): void {
  expect(Array.from(actual), what).toEqual(Array.from(expected));
}
