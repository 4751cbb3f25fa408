/**
 * The house's rules, read from docs/architecture.md: a part of `src/` imports only parts on its own floor
 * or below, and no file imports itself back through a chain of imports (type-only imports included:
 * a cycle of types is still a knot a reader must untie).
 */
import { readFileSync, readdirSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const src = join(root, "src");

/** The floors table of docs/architecture.md: `| part | floor |` rows. */
export function readFloors(markdown: string): Map<string, number> {
  const floors = new Map<string, number>();
  for (const m of markdown.matchAll(/^\|\s*([a-z-]+)\s*\|\s*(\d+)\s*\|\s*$/gm)) floors.set(m[1]!, Number(m[2]));
  return floors;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return path.endsWith(".ts") && !path.endsWith(".d.ts") ? [path] : [];
  });
}

/** Relative module specifiers a file imports or re-exports (static, and `import("...")` with a literal). */
export function importsOf(code: string): string[] {
  const specs = new Set<string>();
  for (const m of code.matchAll(/^\s*(?:import|export)\b[^;]*?\bfrom\s*["']([^"']+)["']/gms)) specs.add(m[1]!);
  for (const m of code.matchAll(/^\s*import\s*["']([^"']+)["']/gm)) specs.add(m[1]!);
  for (const m of code.matchAll(/\bimport\(\s*["']([^"']+)["']\s*\)/g)) specs.add(m[1]!);
  return [...specs].filter((s) => s.startsWith("."));
}

/** The part a file of src/ belongs to: its first folder, or `index` for src/index.ts. */
const partOf = (file: string): string => {
  const rel = relative(src, file).split(/[\\/]/);
  return rel.length === 1 ? rel[0]!.replace(/\.ts$/, "") : rel[0]!;
};

function graph(): Map<string, string[]> {
  const edges = new Map<string, string[]>();
  for (const file of sourceFiles(src)) {
    const targets = importsOf(readFileSync(file, "utf8"))
      .map((spec) => resolve(dirname(file), spec))
      .filter((target) => target.startsWith(src + "/") && target.endsWith(".ts"));
    edges.set(file, targets);
  }
  return edges;
}

/** Every import cycle, each once, as a list of files (Tarjan's strongly connected components). */
export function cycles(edges: Map<string, string[]>): string[][] {
  let index = 0;
  const stack: string[] = [];
  const onStack = new Set<string>();
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const found: string[][] = [];
  const visit = (v: string): void => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    onStack.add(v);
    for (const w of edges.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || (edges.get(v) ?? []).includes(v)) found.push(component);
    }
  };
  for (const v of edges.keys()) if (!idx.has(v)) visit(v);
  return found;
}

describe("the house's layers (docs/architecture.md)", () => {
  const floors = readFloors(readFileSync(join(root, "docs/architecture.md"), "utf8"));
  const edges = graph();

  it("names a floor for every part of src/", () => {
    const parts = new Set([...edges.keys()].map(partOf));
    expect([...parts].filter((p) => !floors.has(p))).toEqual([]);
  });

  it("has no import that runs up a floor", () => {
    const upward: string[] = [];
    for (const [file, targets] of edges) {
      for (const target of targets) {
        const [from, to] = [partOf(file), partOf(target)];
        if ((floors.get(to) ?? Infinity) > (floors.get(from) ?? -Infinity)) {
          upward.push(`${relative(root, file)} (${from}, floor ${floors.get(from)}) imports ${relative(root, target)} (${to}, floor ${floors.get(to)})`);
        }
      }
    }
    expect(upward).toEqual([]);
  });

  it("has no import cycle", () => {
    expect(cycles(edges).map((c) => c.map((f) => relative(root, f)).sort())).toEqual([]);
  });
});

describe("the checks themselves", () => {
  it("find a cycle and only a cycle", () => {
    const g = new Map([["a", ["b"]], ["b", ["c"]], ["c", ["a"]], ["d", ["a"]], ["e", ["e"]]]);
    expect(cycles(g).map((c) => c.sort())).toEqual([["a", "b", "c"], ["e"]]);
    expect(cycles(new Map([["a", ["b"]], ["b", []]]))).toEqual([]);
  });

  it("read static, re-export, side-effect and literal dynamic imports", () => {
    const code = `import { a } from "./a.ts";\nimport type {\n  B,\n} from "../b.ts";\nexport * from "./c.ts";\nimport "./d.ts";\nconst e = await import("./e.ts");\nimport x from "hono";`;
    expect(importsOf(code).sort()).toEqual(["../b.ts", "./a.ts", "./c.ts", "./d.ts", "./e.ts"]);
  });

  it("read the floors table", () => {
    expect([...readFloors("| part | floor |\n|---|---|\n| types | 1 |\n| store | 2 |\n")]).toEqual([["types", 1], ["store", 2]]);
  });
});
