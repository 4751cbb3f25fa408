/**
 * The house's rules, read from docs/architecture.md: a part of `src/` imports only parts on its own floor
 * or below, and no file imports itself back through a chain of imports (type-only imports included:
 * a cycle of types is still a knot a reader must untie). And what differs between runtimes stays in
 * src/platform/ and the named exceptions: no `node:*` (or bare Node built-in) import, and no `Deno`,
 * `Bun`, `process` or `require` used as a global, anywhere else in src/.
 */
import { readFileSync, readdirSync, statSync } from "node:fs";
import { builtinModules } from "node:module";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const src = join(root, "src");

/** The floors table of docs/architecture.md: `| part | floor |` rows. */
function readFloors(markdown: string): Map<string, number> {
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
function importsOf(code: string): string[] {
  const specs = new Set<string>();
  for (const m of code.matchAll(/^\s*(?:import|export)\b[^;]*?\bfrom\s*["']([^"']+)["']/gms)) specs.add(m[1]!);
  for (const m of code.matchAll(/^\s*import\s*["']([^"']+)["']/gm)) specs.add(m[1]!);
  for (const m of code.matchAll(/\bimport\(\s*["']([^"']+)["']\s*\)/g)) specs.add(m[1]!);
  return [...specs].filter((s) => s.startsWith("."));
}

/**
 * Files outside src/platform/ that may use the runtime's own modules: the native libSQL binding's
 * checkpoint worker (a `node:worker_threads` thread that `require`s the binding). docs/architecture.md
 * lists the same exceptions.
 */
const RUNTIME_EXCEPTIONS = ["src/platform/", "src/store/libsql/checkpointer.ts"];

/** Every module specifier a file imports, re-exports or `require`s, relative or not. */
function allSpecifiers(code: string): string[] {
  const specs = new Set<string>();
  for (const m of code.matchAll(/^\s*(?:import|export)\b[^;]*?\bfrom\s*["']([^"']+)["']/gms)) specs.add(m[1]!);
  for (const m of code.matchAll(/^\s*import\s*["']([^"']+)["']/gm)) specs.add(m[1]!);
  for (const m of code.matchAll(/\b(?:import|require)\(\s*["']([^"']+)["']\s*\)/g)) specs.add(m[1]!);
  return [...specs];
}

/** The code without comments and without the text of string and template literals (a template's `${…}` code is kept). */
function codeOnly(code: string): string {
  let out = "";
  let i = 0;
  const braces: number[] = []; // open-brace depth at each `${` still open
  let depth = 0;
  const template = (): void => {
    // Inside a template literal's text, from just after its "`" or "}": up to its end or the next "${".
    while (i < code.length) {
      const c = code[i]!;
      if (c === "\\") i += 2;
      else if (c === "`") {
        out += "`";
        i++;
        return;
      } else if (c === "$" && code[i + 1] === "{") {
        out += "${";
        i += 2;
        braces.push(depth++);
        return;
      } else i++;
    }
  };
  while (i < code.length) {
    const c = code[i]!;
    const next = code[i + 1];
    if (c === "/" && next === "/") {
      while (i < code.length && code[i] !== "\n") i++;
    } else if (c === "/" && next === "*") {
      const end = code.indexOf("*/", i + 2);
      i = end < 0 ? code.length : end + 2;
      out += " ";
    } else if (c === '"' || c === "'") {
      i++;
      while (i < code.length && code[i] !== c && code[i] !== "\n") i += code[i] === "\\" ? 2 : 1;
      i++;
      out += `${c}${c}`;
    } else if (c === "`") {
      out += "`";
      i++;
      template();
    } else if (c === "{") {
      depth++;
      out += c;
      i++;
    } else if (c === "}") {
      depth--;
      out += c;
      i++;
      if (braces.length > 0 && braces[braces.length - 1] === depth) {
        braces.pop();
        template();
      }
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

const NODE_BUILTINS = new Set(builtinModules);

/** What in a file tests for or uses a runtime: `node:*` or Node built-in imports, and the runtime globals. */
function runtimeUses(code: string): string[] {
  const found = new Set<string>();
  for (const spec of allSpecifiers(code))
    if (spec.startsWith("node:") || NODE_BUILTINS.has(spec.split("/")[0]!)) found.add(`import ${spec}`);
  // A global is the bare name: not a property (`x.process`), not part of a longer name (`requireId`).
  for (const m of codeOnly(code).matchAll(/(?<![\w$.])(Deno|Bun|process|require)(?![\w$])/g)) found.add(m[1]!);
  return [...found].sort();
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
function cycles(edges: Map<string, string[]>): string[][] {
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
          upward.push(
            `${relative(root, file)} (${from}, floor ${floors.get(from)}) imports ${relative(root, target)} (${to}, floor ${floors.get(to)})`,
          );
        }
      }
    }
    expect(upward).toEqual([]);
  });

  it("has no import cycle", () => {
    expect(cycles(edges).map((c) => c.map((f) => relative(root, f)).sort())).toEqual([]);
  });

  it("keeps runtime globals and node:* imports in src/platform/ and the named exceptions", () => {
    const leaks: string[] = [];
    for (const file of edges.keys()) {
      const rel = relative(root, file).split("\\").join("/");
      if (RUNTIME_EXCEPTIONS.some((e) => rel.startsWith(e))) continue;
      const uses = runtimeUses(readFileSync(file, "utf8"));
      if (uses.length > 0) leaks.push(`${rel}: ${uses.join(", ")}`);
    }
    expect(leaks).toEqual([]);
  });
});

describe("the checks themselves", () => {
  it("find a cycle and only a cycle", () => {
    const g = new Map([
      ["a", ["b"]],
      ["b", ["c"]],
      ["c", ["a"]],
      ["d", ["a"]],
      ["e", ["e"]],
    ]);
    expect(cycles(g).map((c) => c.sort())).toEqual([["a", "b", "c"], ["e"]]);
    expect(
      cycles(
        new Map([
          ["a", ["b"]],
          ["b", []],
        ]),
      ),
    ).toEqual([]);
  });

  it("read static, re-export, side-effect and literal dynamic imports", () => {
    const code = `import { a } from "./a.ts";\nimport type {\n  B,\n} from "../b.ts";\nexport * from "./c.ts";\nimport "./d.ts";\nconst e = await import("./e.ts");\nimport x from "hono";`;
    expect(importsOf(code).sort()).toEqual(["../b.ts", "./a.ts", "./c.ts", "./d.ts", "./e.ts"]);
  });

  it("find runtime globals and node imports in code, not in comments, strings or property names", () => {
    expect(runtimeUses(`import { readFileSync } from "node:fs";\nimport os from "os";\nconst x = await import("node:path");`)).toEqual([
      "import node:fs",
      "import node:path",
      "import os",
    ]);
    expect(runtimeUses(`const b = (globalThis as { Bun?: unknown }).Bun;`)).toEqual(["Bun"]);
    expect(runtimeUses(`if (typeof Deno !== "undefined") {}`)).toEqual(["Deno"]);
    expect(runtimeUses(`const env = process.env.X;`)).toEqual(["process"]);
    expect(runtimeUses(`const m = require("libsql");`)).toEqual(["require"]);
    expect(runtimeUses("const s = `${process.pid} ok`;")).toEqual(["process"]);
    // Not uses: comments, string and template text, properties, longer names, other imports.
    const clean = [
      "// process.exit(1) on Deno or Bun",
      "/* typeof Bun */ const a = 1;",
      `const s = "process"; const t = 'Deno.env';`,
      "const u = `on Bun ${a} and process`;",
      "x.process(y); requireId(z); const processed = 1; this.require;",
      `import { Hono } from "hono";\nimport { a } from "./process.ts";`,
    ];
    for (const code of clean) expect(runtimeUses(code), code).toEqual([]);
  });

  it("read the floors table", () => {
    expect([...readFloors("| part | floor |\n|---|---|\n| types | 1 |\n| store | 2 |\n")]).toEqual([
      ["types", 1],
      ["store", 2],
    ]);
  });
});
