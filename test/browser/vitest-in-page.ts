/**
 * Just enough of vitest's API to run a suite written for vitest inside a browser page (the store
 * conformance suite, test/browser/loop.test.ts): `describe`, `it`, `it.each`, `beforeEach` and `afterEach`
 * collect the tests, `runCollected` runs them in order (hooks of the enclosing suites around each), and
 * `expect` is vitest's own (@vitest/expect's matchers on chai). A bundler maps `vitest` here.
 */
import { chai, GLOBAL_EXPECT, JestAsymmetricMatchers, JestChaiExpect, JestExtend, setState } from "@vitest/expect";

chai.use(JestExtend);
chai.use(JestChaiExpect);
chai.use(JestAsymmetricMatchers);

type Fn = () => unknown;
export const expect = ((value: unknown, message?: string) => chai.expect(value, message)) as unknown as typeof import("vitest").expect;
Object.assign(expect, chai.expect);
setState({ assertionCalls: 0, isExpectingAssertions: false, expectedAssertionsNumber: null, currentTestName: "" }, expect);
(globalThis as Record<symbol, unknown>)[GLOBAL_EXPECT] = expect;

interface Suite {
  name: string;
  before: Fn[];
  after: Fn[];
  children: (Suite | TestCase)[];
}
interface TestCase {
  name: string;
  fn: Fn;
}

const root: Suite = { name: "", before: [], after: [], children: [] };
let current = root;

const lastFn = (args: unknown[]): Fn => args.findLast((a) => typeof a === "function") as Fn;

export function describe(name: string, ...rest: unknown[]): void {
  const suite: Suite = { name, before: [], after: [], children: [] };
  current.children.push(suite);
  const parent = current;
  current = suite;
  try {
    lastFn(rest)();
  } finally {
    current = parent;
  }
}

/** vitest's title formatting, the parts the suites use: `%s`/`%i`/`%d`/`%j` in order, `$name` of an object case. */
function title(template: string, c: unknown): string {
  if (Array.isArray(c)) {
    let i = 0;
    return template.replace(/%[sidj]/g, () => String(c[i++]));
  }
  return template.replace(/\$([A-Za-z_]\w*)/g, (_, k: string) => String((c as Record<string, unknown>)[k]));
}

export function it(name: string, ...rest: unknown[]): void {
  current.children.push({ name, fn: lastFn(rest) });
}
it.each =
  (cases: readonly unknown[]) =>
  (template: string, fn: (...args: unknown[]) => unknown): void => {
    for (const c of cases) it(title(template, c), () => (Array.isArray(c) ? fn(...c) : fn(c)));
  };
export const test = it;

export function beforeEach(fn: Fn): void {
  current.before.push(fn);
}
export function afterEach(fn: Fn): void {
  current.after.push(fn);
}

export interface SuiteResult {
  /** Tests declared. */
  collected: number;
  passed: string[];
  failed: { name: string; error: string }[];
}

/** Runs every collected test, one after another. */
export async function runCollected(): Promise<SuiteResult> {
  const result: SuiteResult = { collected: 0, passed: [], failed: [] };
  const walk = async (suite: Suite, chain: Suite[], path: string[]): Promise<void> => {
    for (const child of suite.children) {
      if ("children" in child) {
        await walk(child, [...chain, child], [...path, child.name]);
        continue;
      }
      const name = [...path, child.name].join(" > ");
      result.collected++;
      try {
        for (const s of chain) for (const h of s.before) await h();
        try {
          await child.fn();
        } finally {
          for (const s of [...chain].reverse()) for (const h of s.after) await h();
        }
        result.passed.push(name);
      } catch (e) {
        result.failed.push({ name, error: e instanceof Error ? e.message : String(e) });
      }
    }
  };
  await walk(root, [root], []);
  return result;
}
