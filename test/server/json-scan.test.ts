/**
 * The scan of JSON text for the body limits (src/server/json-scan.ts): on random JSON full of strings
 * that look like structure, it finds exactly what a walk of the parsed value finds (the deepest
 * container, the widest object, and the path of the first one past a limit).
 */
import { describe, expect, it } from "vitest";
import { jsonPathAt, scanJsonLimits } from "../../src/server/json-scan.ts";
import { rng, type Rng } from "../wasm/random.ts";

/** Strings a naive scan would miscount: structure characters, escaped quotes and backslashes, unicode. */
const TRICKY = ["a:b", "{", "}[", '"', '\\"', "\\", ':"{', "é:", "\u2028", ""];

function randomJson(r: Rng, depth: number): unknown {
  if (depth > 6 || r.bool(0.3)) return r.pick([1, -2.5e3, true, null, r.int(0, 9) + r.pick(TRICKY)]);
  if (r.bool()) return Array.from({ length: r.int(0, 5) }, () => randomJson(r, depth + 1));
  const o: Record<string, unknown> = {};
  for (let i = r.int(0, 7); i > 0; i--) o[`${i}${r.pick(TRICKY)}`] = randomJson(r, depth + 1);
  return o;
}

/** JSON text with random whitespace between tokens (outside strings). */
function spaced(r: Rng, value: unknown): string {
  const ws = () => r.pick(["", " ", "\n\t", "\r\n "]);
  if (Array.isArray(value)) return `[${ws()}${value.map((v) => spaced(r, v)).join(`${ws()},${ws()}`)}${ws()}]`;
  if (value !== null && typeof value === "object") {
    const members = Object.entries(value).map(([k, v]) => `${JSON.stringify(k)}${ws()}:${ws()}${spaced(r, v)}`);
    return `{${ws()}${members.join(`${ws()},${ws()}`)}${ws()}}`;
  }
  return JSON.stringify(value);
}

/** The first container (in text order) past either limit, from the parsed value: [limit, path] or null. */
function reference(value: unknown, maxDepth: number, maxKeys: number): ["depth" | "keys", (string | number)[]] | null {
  const visit = (v: unknown, depth: number, path: (string | number)[]): ["depth" | "keys", (string | number)[]] | null => {
    if (v === null || typeof v !== "object") return null;
    if (depth > maxDepth) return ["depth", path];
    const entries: [string | number, unknown][] = Array.isArray(v) ? v.map((x, i) => [i, x]) : Object.entries(v);
    // A too-wide object is found at its (maxKeys + 1)-th member: deeper breaches before that come first.
    for (let i = 0; i < entries.length; i++) {
      if (!Array.isArray(v) && i === maxKeys) return ["keys", path];
      const found = visit(entries[i]![1], depth + 1, [...path, entries[i]![0]]);
      if (found) return found;
    }
    return null;
  };
  return visit(value, 1, []);
}

describe("scanJsonLimits and jsonPathAt", () => {
  it("agree with a walk of the parsed value on 3,000 random bodies with tricky strings and whitespace", () => {
    const r = rng(37);
    for (let n = 0; n < 3_000; n++) {
      const value = randomJson(r, 1);
      const text = spaced(r, value);
      const maxDepth = r.int(1, 6);
      const maxKeys = r.int(0, 6);
      const expected = reference(value, maxDepth, maxKeys);
      const breach = scanJsonLimits(text, maxDepth, maxKeys);
      const got = breach === null ? null : [breach.limit, jsonPathAt(text, breach.at)];
      expect(got, text).toEqual(expected);
    }
  });

  // Bodies too small to pass a limit are not scanned: at the smallest size that can, the scan must run.
  it("the smallest body past each limit is still found: members of 5 characters, nested brackets", () => {
    const object = (members: number) => `{${Array.from({ length: members }, () => '"":0').join(",")}}`;
    for (const maxKeys of [0, 1, 7, 100]) {
      const text = object(maxKeys + 1);
      expect(scanJsonLimits(text, 512, maxKeys), text).toEqual({ limit: "keys", at: 0 });
      // One member fewer, or the same text with a limit of one more: nothing to refuse.
      expect(scanJsonLimits(object(maxKeys), 512, maxKeys), text).toBeNull();
      expect(scanJsonLimits(text, 512, maxKeys + 1), text).toBeNull();
    }
    for (const maxDepth of [1, 2, 9, 512]) {
      const text = `${"[".repeat(maxDepth + 1)}${"]".repeat(maxDepth + 1)}`;
      expect(scanJsonLimits(text, maxDepth, 10_000), text).toEqual({ limit: "depth", at: maxDepth });
      expect(scanJsonLimits(text, maxDepth + 1, 10_000), text).toBeNull();
      // Objects and arrays together (maxDepth + 1 containers): the count covers both kinds.
      const half = Math.floor((maxDepth + 1) / 2);
      const nested = `${'{"a":['.repeat(half)}${(maxDepth + 1) % 2 === 1 ? "{}" : "0"}${"]}".repeat(half)}`;
      expect(scanJsonLimits(nested, maxDepth, 10_000)?.limit, nested).toBe("depth");
      expect(scanJsonLimits(nested, maxDepth + 1, 10_000), nested).toBeNull();
    }
  });

  it("a million-key object is refused at its first key past the limit", () => {
    const text = `{"input":{${Array.from({ length: 1_000_000 }, (_, i) => `"k${i}":0`).join(",")}}}`;
    const breach = scanJsonLimits(text, 512, 10_000);
    expect(breach).toEqual({ limit: "keys", at: text.indexOf("{", 1) });
    expect(jsonPathAt(text, breach!.at)).toEqual(["input"]);
  });
});
