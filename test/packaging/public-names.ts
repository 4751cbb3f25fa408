/**
 * What the documentation shows a user of the package: the code of README.md, docs/*.md and examples/ (in
 * Markdown, its fenced blocks and inline code spans), the names that code uses, and its imports from
 * `lightning-ts` or a subpath; and the names an entry exports, types included, from the TypeScript checker.
 * Used by exports.test.ts (the entries against the docs) and pack.test.ts (the docs' imports against the
 * published declarations).
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

export const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const read = (path: string) => readFileSync(join(root, path), "utf8");
const pkg = JSON.parse(read("package.json")) as { exports: Record<string, string | { import: string }> };

/** README.md, docs/*.md and every Markdown, TypeScript and HTML file under examples/. */
export function docFiles(): string[] {
  const files = [
    "README.md",
    ...readdirSync(join(root, "docs"))
      .filter((f) => f.endsWith(".md"))
      .map((f) => `docs/${f}`),
  ];
  const walk = (dir: string) => {
    for (const name of readdirSync(join(root, dir)).sort()) {
      const path = `${dir}/${name}`;
      if (statSync(join(root, path)).isDirectory()) walk(path);
      else if (/\.(md|ts|html)$/.test(name)) files.push(path);
    }
  };
  walk("examples");
  return files;
}

/** The code of a file: a Markdown file's fenced blocks and inline code spans, any other file whole. */
export function codeOf(path: string): string {
  const text = read(path);
  if (!path.endsWith(".md")) return text;
  const blocks: string[] = [];
  const prose = text.replace(/^```[^\n]*\n([\s\S]*?)^```/gm, (_, block: string) => {
    blocks.push(block);
    return "";
  });
  for (const m of prose.matchAll(/`([^`\n]+)`/g)) blocks.push(m[1]);
  return blocks.join("\n");
}

/** Every identifier the docs' and examples' code writes, leaving out property names (`x.name`). */
export function usedNames(): Set<string> {
  const names = new Set<string>();
  for (const file of docFiles()) for (const m of codeOf(file).matchAll(/(?<![\w$.])[A-Za-z_$][\w$]*/g)) names.add(m[0]);
  return names;
}

export interface DocImport {
  file: string;
  /** The package specifier: "lightning-ts" or "lightning-ts/<subpath>". */
  spec: string;
  values: string[];
  types: string[];
}

/** The package specifier a doc imports: by name, or as a served file of dist/ (docs/browser.md's import map). */
function packageSpec(source: string): string | undefined {
  if (source === "lightning-ts" || source.startsWith("lightning-ts/")) return source;
  const file = /\/node_modules\/lightning-ts\/(dist\/.+\.js)$/.exec(source)?.[1];
  if (file === undefined) return undefined;
  const key = Object.entries(pkg.exports).find(([, t]) => typeof t === "object" && t.import === `./${file}`)?.[0];
  if (key === undefined) throw new Error(`${source} is no entry of package.json exports`);
  return key === "." ? "lightning-ts" : `lightning-ts${key.slice(1)}`;
}

/** Every `import { … } from` the package in the docs' and examples' code. */
export function docImports(): DocImport[] {
  const out: DocImport[] = [];
  for (const file of docFiles()) {
    for (const m of codeOf(file).matchAll(/import\s+(type\s+)?\{([^}]*)\}\s*from\s*["']([^"']+)["']/g)) {
      const spec = packageSpec(m[3]);
      if (spec === undefined) continue;
      const entry: DocImport = { file, spec, values: [], types: [] };
      const list = m[2].replace(/\/\/[^\n]*/g, "").replace(/\/\*[\s\S]*?\*\//g, "");
      for (const item of list.split(",").map((s) => s.trim())) {
        if (item === "") continue;
        const name = item.replace(/^type\s+/, "").split(/\s+as\s+/)[0];
        (m[1] !== undefined || item.startsWith("type ") ? entry.types : entry.values).push(name);
      }
      out.push(entry);
    }
  }
  return out;
}

/** The source file behind a package specifier ("lightning-ts", "lightning-ts/client", ...). */
export function sourceOf(spec: string): string {
  const key = spec === "lightning-ts" ? "." : `.${spec.slice("lightning-ts".length)}`;
  const target = pkg.exports[key];
  if (typeof target !== "object") throw new Error(`${spec} is not an entry of package.json exports`);
  return join(root, target.import.replace(/^\.\/dist\//, "").replace(/\.js$/, ".ts"));
}

/** Every name a source module exports, values and types, as the TypeScript checker sees it. */
export function exportedNames(files: string[]): Map<string, Set<string>> {
  const program = ts.createProgram(files, {
    allowImportingTsExtensions: true,
    noEmit: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    types: [],
  });
  const checker = program.getTypeChecker();
  const out = new Map<string, Set<string>>();
  for (const file of files) {
    const source = program.getSourceFile(file);
    const module = source && checker.getSymbolAtLocation(source);
    if (module === undefined) throw new Error(`TypeScript found no module at ${file}`);
    out.set(file, new Set(checker.getExportsOfModule(module).map((s) => s.name)));
  }
  return out;
}
