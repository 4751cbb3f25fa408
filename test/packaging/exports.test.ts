/**
 * The public surface, checked on the sources (fast; test/packaging/pack.test.ts checks the built
 * tarball): what the package root re-exports, that README.md's imports resolve, that no test hook is
 * public, and that package.json's dependencies are exactly what the published code imports.
 */
import { readdirSync, readFileSync } from "node:fs";
import { builtinModules } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const read = (path: string) => readFileSync(join(root, path), "utf8");
const pkg = JSON.parse(read("package.json")) as {
  exports: Record<string, string | { import: string }>;
  dependencies: Record<string, string>;
  peerDependencies?: Record<string, string>;
};

/** The source module behind a package specifier ("lightning-ts", "lightning-ts/client", ...). */
function sourceOf(spec: string): string {
  const key = spec === "lightning-ts" ? "." : `.${spec.slice("lightning-ts".length)}`;
  const target = pkg.exports[key];
  if (typeof target !== "object") throw new Error(`${spec} is not an entry of package.json exports`);
  return join(root, target.import.replace(/^\.\/dist\//, "").replace(/\.js$/, ".ts"));
}
const namesOf = async (spec: string) => Object.keys(await import(sourceOf(spec)));

describe("the package root", () => {
  const parts = [...read("src/index.ts").matchAll(/^export \* from "\.\/(\w+)\/index\.ts";$/gm)].map((m) => m[1]);

  it("re-exports the parts a user starts with, and every name of each (no name lost to a collision)", async () => {
    expect(parts).toEqual(["types", "store", "client", "tracer", "runner", "trainer", "algorithm", "adapter"]);
    const owners = new Map<string, string[]>();
    for (const part of parts)
      for (const name of await namesOf(`lightning-ts/${part}`)) owners.set(name, [...(owners.get(name) ?? []), part]);
    expect([...owners].filter(([, o]) => o.length > 1)).toEqual([]);
    expect((await namesOf("lightning-ts")).sort()).toEqual([...owners.keys()].sort());
  });

  it("includes GRPO and leaves the specialised parts to their subpaths", async () => {
    const names = await namesOf("lightning-ts");
    for (const name of [
      "GRPO",
      "Baseline",
      "Trainer",
      "LightningStoreClient",
      "InMemoryLightningStore",
      "openStore",
      "emitReward",
      "TraceTripletAdapter",
    ]) {
      expect(names).toContain(name);
    }
    expect(await namesOf("lightning-ts/algorithm")).toContain("GRPO");
    for (const name of ["loadWasmCore", "CpuTrainer", "GpuPolicyTrainer", "PolicyServer", "createStoreApp"])
      expect(names).not.toContain(name);
  });

  it("resolves every import of README.md's examples", async () => {
    const imports = [...read("README.md").matchAll(/import \{([^}]*)\} from "(lightning-ts[^"]*)"/g)];
    expect(imports.length).toBeGreaterThan(0);
    for (const [, list, spec] of imports) {
      const names = await namesOf(spec);
      const values = list
        .split(",")
        .map((s) => s.trim())
        .filter((s) => s.length > 0 && !s.startsWith("type "));
      expect(
        values.filter((v) => !names.includes(v.split(/\s+as\s+/)[0])),
        spec,
      ).toEqual([]);
    }
  });
});

describe("lightning-ts/server", () => {
  it("does not export the test-only hooks (tests import src/server/test-hooks.ts by path)", async () => {
    const names = await namesOf("lightning-ts/server");
    expect(names).toContain("createStoreApp");
    for (const hook of ["createTestStore", "TEST_CLOCK_HEADER"]) expect(names).not.toContain(hook);
  });
});

describe("package.json dependencies", () => {
  /** Every .ts file the build compiles (tsconfig.build.json: src/ and runtimes/node.ts). */
  const published = (): string[] => {
    const files = ["runtimes/node.ts"];
    const walk = (dir: string) => {
      for (const e of readdirSync(join(root, dir), { withFileTypes: true })) {
        if (e.isDirectory()) walk(`${dir}/${e.name}`);
        else if (e.name.endsWith(".ts")) files.push(`${dir}/${e.name}`);
      }
    };
    walk("src");
    return files;
  };
  const packageOf = (spec: string) =>
    spec
      .split("/")
      .slice(0, spec.startsWith("@") ? 2 : 1)
      .join("/");
  const builtins = new Set(builtinModules);

  it("are exactly the packages the published code imports; optional peers are the ones it loads by name", () => {
    const imported = new Set<string>();
    const loadedByName = new Set<string>();
    for (const file of published()) {
      const text = read(file);
      // static and dynamic imports, type positions and triple-slash type references
      for (const m of text.matchAll(/(?:\bfrom\s+|\bimport\s*\(\s*|<reference types=)"([^".][^"]*)"/g)) imported.add(packageOf(m[1]));
      // native bindings imported through a constant (src/gpu/navigator.ts)
      for (const m of text.matchAll(/^const \w+ = "([^"]+)";$/gm)) if (Object.hasOwn(pkg.peerDependencies ?? {}, m[1])) loadedByName.add(m[1]);
    }
    const external = [...imported].filter((p) => !p.startsWith("node:") && !builtins.has(p)).sort();
    expect(external).toEqual(Object.keys(pkg.dependencies).sort());
    expect([...loadedByName].sort()).toEqual(Object.keys(pkg.peerDependencies ?? {}).sort());
  });
});
