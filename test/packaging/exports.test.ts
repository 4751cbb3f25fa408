/**
 * The public surface, checked on the sources (fast; test/packaging/pack.test.ts checks the built
 * tarball): the root and browser entries are written-out lists of what README.md, docs/ and examples/
 * use, every import those docs write resolves, no test hook is public, and package.json's dependencies
 * are exactly what the published code imports.
 */
import { readdirSync, readFileSync } from "node:fs";
import { builtinModules } from "node:module";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { docImports, exportedNames, root, sourceOf, usedNames } from "./public-names.ts";

const read = (path: string) => readFileSync(join(root, path), "utf8");
const pkg = JSON.parse(read("package.json")) as {
  exports: Record<string, string | { import: string }>;
  dependencies: Record<string, string>;
  peerDependencies?: Record<string, string>;
};
const namesOf = async (spec: string) => Object.keys(await import(sourceOf(spec)));

/** Names an entry holds although no doc or example writes them, each with the reason. */
const WIRE_OBJECTS = {
  Rollout: "what enqueueRollout, getRolloutById and waitForRollouts return",
  AttemptedRollout: "what startRollout and dequeueRollout return: a rollout with its current attempt",
  Attempt: "what queryAttempts, getLatestAttempt and updateAttempt return",
  ResourcesUpdate: "what addResources and getLatestResources return",
};
const ALLOWED: Record<string, Record<string, string>> = {
  "lightning-ts": WIRE_OBJECTS,
  "lightning-ts/browser": {
    ...WIRE_OBJECTS,
    spanFromAttributes: "a page that writes spans to the store builds them with it (test/browser/scenarios.ts)",
  },
};
/** The most names the root may hold (values and types): a front door, not the whole house. */
const ROOT_LIMIT = 120;

const specs = Object.keys(pkg.exports)
  .filter((key) => key !== "./package.json")
  .map((key) => (key === "." ? "lightning-ts" : `lightning-ts${key.slice(1)}`));
const exported = exportedNames(specs.map(sourceOf));
const namesAt = (spec: string) => exported.get(sourceOf(spec)) ?? new Set<string>();
const imports = docImports();
const used = usedNames();

for (const spec of ["lightning-ts", "lightning-ts/browser"]) {
  describe(`${spec}: a written-out list of what the docs use`, () => {
    const file = sourceOf(spec).slice(root.length + 1);
    const names = [...namesAt(spec)].sort();

    it("names every export (no `export *`); the names a module exports at run time are its listed values", async () => {
      const text = read(file);
      expect(text).not.toMatch(/^export \*/m);
      const listed = [...text.matchAll(/^export (type )?\{([^}]*)\} from "[^"]+";$/gm)].flatMap((m) =>
        m[2]
          .split(",")
          .map((s) => s.trim())
          .filter((s) => s !== ""),
      );
      expect(listed.map((s) => s.replace(/^type /, "")).sort()).toEqual(names);
      const values = listed.filter((s) => !s.startsWith("type ")).sort();
      expect((await namesOf(spec)).sort()).toEqual(values);
    });

    it("holds every name README.md, docs/ and examples/ import from it", () => {
      const wanted = imports.filter((i) => i.spec === spec);
      if (spec === "lightning-ts") expect(wanted.length).toBeGreaterThan(0);
      for (const i of wanted)
        expect(
          [...i.values, ...i.types].filter((n) => !names.includes(n)),
          `${i.file}: ${spec}`,
        ).toEqual([]);
    });

    it("holds no name that README.md, docs/ and examples/ do not use, beyond its allow-list", () => {
      const allowed = ALLOWED[spec];
      expect(names.filter((n) => !used.has(n) && !Object.hasOwn(allowed, n))).toEqual([]);
      // an allowance is for a name the entry holds and no doc uses yet
      expect(Object.keys(allowed).filter((n) => !names.includes(n) || used.has(n))).toEqual([]);
    });
  });
}

describe("the package root", () => {
  it(`holds fewer than ${ROOT_LIMIT} names, GRPO among them, and leaves the specialised parts to their subpaths`, async () => {
    const names = namesAt("lightning-ts");
    expect(names.size).toBeLessThan(ROOT_LIMIT);
    for (const name of [
      "GRPO",
      "Baseline",
      "Trainer",
      "LightningStoreClient",
      "InMemoryLightningStore",
      "openStore",
      "emitReward",
      "TraceTripletAdapter",
    ])
      expect(names).toContain(name);
    expect(await namesOf("lightning-ts/algorithm")).toContain("GRPO");
    for (const name of ["loadWasmCore", "CpuTrainer", "GpuPolicyTrainer", "PolicyServer", "createStoreApp", "blockForward"])
      expect(names).not.toContain(name);
  });
});

describe("the docs' imports", () => {
  it("every name README.md, docs/ and examples/ import from the package or a subpath, types included, is exported there", () => {
    expect(imports.map((i) => i.spec)).toEqual(expect.arrayContaining(["lightning-ts", "lightning-ts/browser", "lightning-ts/model"]));
    const missing = imports.flatMap((i) =>
      [...i.values, ...i.types].filter((n) => !namesAt(i.spec).has(n)).map((n) => `${i.file}: ${n} from ${i.spec}`),
    );
    expect(missing).toEqual([]);
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
      for (const m of text.matchAll(/^const \w+ = "([^"]+)";$/gm))
        if (Object.hasOwn(pkg.peerDependencies ?? {}, m[1])) loadedByName.add(m[1]);
    }
    const external = [...imported].filter((p) => !p.startsWith("node:") && !builtins.has(p)).sort();
    expect(external).toEqual(Object.keys(pkg.dependencies).sort());
    expect([...loadedByName].sort()).toEqual(Object.keys(pkg.peerDependencies ?? {}).sort());
  });
});
