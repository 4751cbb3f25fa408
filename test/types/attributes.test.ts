/**
 * Reading flat dotted span attributes back into objects (unflatten, filterAndUnflatten) with key segments
 * that name a prototype: `__proto__`, `constructor` and `prototype` are ordinary keys of the result, and
 * nothing is read from or written to Object.prototype (or any other prototype).
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { filterAndUnflatten, unflatten } from "../../src/types/index.ts";
import { PROTOTYPE_KEYS, nestedText, prototypeChanges, restorePrototypes, shapesFor, snapshotPrototypes } from "../store/proto-json.ts";

let before: ReturnType<typeof snapshotPrototypes>;
beforeEach(() => {
  before = snapshotPrototypes();
});
afterEach(() => {
  const changes = prototypeChanges(before);
  restorePrototypes(before);
  expect(changes, "prototypes changed").toEqual([]);
});

/** `{ [key]: value }` as JSON.parse makes it (an own key, whatever its name). */
const flat = (entries: [string, unknown][]): Record<string, unknown> =>
  JSON.parse(`{${entries.map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`).join(",")}}`);

/** Every object in `v`, nested in objects and arrays. */
function objectsIn(v: unknown, out: object[] = []): object[] {
  if (typeof v !== "object" || v === null) return out;
  if (!Array.isArray(v)) out.push(v);
  for (const x of Object.values(v)) objectsIn(x, out);
  return out;
}

describe("unflatten with __proto__, constructor and prototype segments", () => {
  for (const k of PROTOTYPE_KEYS) {
    for (const key of shapesFor(k)) {
      it(`${key}: an own key of a plain object, for a number, a string and a list`, () => {
        for (const value of [1, "s", [1, 2]]) {
          const out = unflatten(flat([[key, value]]));
          expect(JSON.stringify(out), `${key} = ${JSON.stringify(value)}`).toBe(nestedText(key, value));
          for (const o of objectsIn(out)) expect(Object.getPrototypeOf(o)).toBe(Object.prototype);
          expect(({} as Record<string, unknown>).x).toBeUndefined();
        }
      });
    }
  }

  it("keys under the same __proto__ segment merge into one object, and later keys win as for any other name", () => {
    const out = unflatten(
      flat([
        ["a.__proto__.x", 1],
        ["a.__proto__.y", 2],
        ["a.b", 3],
        ["c.constructor", 4],
        ["c.constructor.z", 5],
        ["d.__proto__.w", 6],
        ["d.__proto__", 7],
      ]),
    );
    expect(JSON.stringify(out)).toBe('{"a":{"__proto__":{"x":1,"y":2},"b":3},"c":{"constructor":{"z":5}},"d":{"__proto__":7}}');
  });

  it('a dict keyed "0".."n-1" is still a list; one with a __proto__ key among them is not', () => {
    expect(
      JSON.stringify(
        unflatten(
          flat([
            ["0.__proto__", 1],
            ["1.constructor", 2],
          ]),
        ),
      ),
    ).toBe('[{"__proto__":1},{"constructor":2}]');
    expect(
      JSON.stringify(
        unflatten(
          flat([
            ["0", 1],
            ["__proto__", 2],
          ]),
        ),
      ),
    ).toBe('{"0":1,"__proto__":2}');
  });
});

describe("filterAndUnflatten with prototype-naming keys", () => {
  it("keeps `prefix.__proto__` (a list included) and `prefix.x.__proto__.y` as data", () => {
    const attrs = flat([
      ["agentlightning.reward.__proto__", [1, 2]],
      ["agentlightning.reward.__proto__.polluted", 1],
      ["gen_ai.prompt.__proto__.x.y", 1],
      ["gen_ai.prompt.0.role", "user"],
      ["gen_ai.prompt.constructor.prototype.polluted", true],
    ]);
    expect(JSON.stringify(filterAndUnflatten(attrs, "agentlightning.reward"))).toBe('{"__proto__":{"polluted":1}}');
    expect(JSON.stringify(filterAndUnflatten(attrs, "gen_ai.prompt"))).toBe(
      '{"0":{"role":"user"},"__proto__":{"x":{"y":1}},"constructor":{"prototype":{"polluted":true}}}',
    );
    expect(JSON.stringify(filterAndUnflatten(flat([["p.__proto__", ["a"]]]), "p"))).toBe('{"__proto__":["a"]}');
  });
});
