/**
 * Walks the import graph of an ES module entry as a browser (or a bundler building for one) would: every
 * static import and re-export, and every `import("…")` with a literal specifier, type-only imports erased
 * (TypeScript files are transpiled first). Relative specifiers are followed; bare ones are recorded, and a
 * `node:*` or Node built-in one is a violation, reported with the chain of files that reaches it.
 */
import { readFileSync } from "node:fs";
import { builtinModules } from "node:module";
import { dirname, relative, resolve } from "node:path";
import ts from "typescript";

export interface ImportGraph {
  /** Files reached, absolute paths. */
  files: string[];
  /** Bare specifiers imported (packages), each once. */
  packages: string[];
  /** Node built-ins reached: the specifier and the chain of files (relative to `root`) from the entry. */
  violations: { specifier: string; chain: string[] }[];
}

const BUILTINS = new Set(builtinModules);

export const isNodeBuiltin = (spec: string): boolean => spec.startsWith("node:") || BUILTINS.has(spec.split("/")[0]!);

/** The code a runtime executes: TypeScript with its types erased (imports kept as written), JavaScript as is. */
function runtimeCode(file: string): string {
  const code = readFileSync(file, "utf8");
  if (!file.endsWith(".ts")) return code;
  return ts.transpileModule(code, {
    fileName: file,
    compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, verbatimModuleSyntax: true },
  }).outputText;
}

/** Module specifiers of static imports, re-exports and literal dynamic imports. */
export function specifiersOf(code: string): string[] {
  const specs = new Set<string>();
  for (const m of code.matchAll(/^\s*(?:import|export)\b[^;]*?\bfrom\s*["']([^"']+)["']/gms)) specs.add(m[1]!);
  for (const m of code.matchAll(/^\s*import\s*["']([^"']+)["']/gm)) specs.add(m[1]!);
  for (const m of code.matchAll(/\bimport\(\s*(?:\/\*[^*]*\*\/\s*)*["']([^"']+)["']\s*\)/g)) specs.add(m[1]!);
  return [...specs];
}

export function importGraph(entry: string, root: string): ImportGraph {
  const parent = new Map<string, string | null>([[entry, null]]);
  const queue = [entry];
  const packages = new Set<string>();
  const violations: ImportGraph["violations"] = [];
  const chain = (file: string): string[] => {
    const out: string[] = [];
    for (let f: string | null | undefined = file; f; f = parent.get(f)) out.unshift(relative(root, f));
    return out;
  };
  while (queue.length > 0) {
    const file = queue.shift()!;
    for (const spec of specifiersOf(runtimeCode(file))) {
      if (spec.startsWith(".")) {
        const target = resolve(dirname(file), spec);
        if (!parent.has(target)) {
          parent.set(target, file);
          queue.push(target);
        }
      } else if (isNodeBuiltin(spec)) violations.push({ specifier: spec, chain: chain(file) });
      else packages.add(spec);
    }
  }
  return { files: [...parent.keys()], packages: [...packages].sort(), violations };
}
