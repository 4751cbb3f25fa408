/**
 * The Wasm part's boundary in src/: it sits low (it imports only itself and src/types), its plain-TS
 * oracles (src/wasm/reference/) are reached only through its entry's `referenceKernels`, and the rest of
 * the library gets Wasm kernels from it (`libraryKernels()`) instead of instantiating its own.
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");

function sourceFiles(dir: string): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourceFiles(`${dir}/${e.name}`) : e.name.endsWith(".ts") ? [`${dir}/${e.name}`] : [],
  );
}

/** Repository-relative paths of the relative imports of one file (static, dynamic and type-only). */
function relativeImports(file: string): string[] {
  const text = readFileSync(join(root, file), "utf8");
  return [...text.matchAll(/(?:\bfrom\s+|\bimport\s*\(\s*)"(\.{1,2}\/[^"]+)"/g)].map((m) =>
    relative(root, resolve(root, dirname(file), m[1])),
  );
}

const files = sourceFiles("src");
const inside = (path: string, dir: string) => path.startsWith(`${dir}/`);

describe("the Wasm part of src/", () => {
  it("imports nothing but itself and src/types", () => {
    const upward = files
      .filter((f) => inside(f, "src/wasm"))
      .flatMap((f) =>
        relativeImports(f)
          .filter((i) => !inside(i, "src/wasm") && !inside(i, "src/types"))
          .map((i) => `${f} -> ${i}`),
      );
    expect(upward).toEqual([]);
  });

  it("keeps its test oracles to itself: only its entry reaches src/wasm/reference/", () => {
    const users = files
      .filter((f) => !inside(f, "src/wasm/reference"))
      .flatMap((f) =>
        relativeImports(f)
          .filter((i) => inside(i, "src/wasm/reference"))
          .map(() => f),
      );
    expect([...new Set(users)]).toEqual(["src/wasm/index.ts"]);
  });

  it("is the only part that instantiates the Wasm core; the others call libraryKernels()", () => {
    const instantiating = files.filter(
      (f) =>
        !inside(f, "src/wasm") &&
        /\b(wasmKernels|new WasmKernels|instantiateWasmCore(Sync)?|loadWasmCore(Sync)?)\(/.test(readFileSync(join(root, f), "utf8")),
    );
    expect(instantiating).toEqual([]);
    const callers = files.filter((f) => /\blibraryKernels\(\)/.test(readFileSync(join(root, f), "utf8")) && !inside(f, "src/wasm"));
    expect(callers).toContain("src/algorithm/grpo-step.ts");
  });
});
