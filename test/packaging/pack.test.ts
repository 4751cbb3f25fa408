/**
 * What `npm pack` publishes, and that it works once installed. The build (`tsc -p tsconfig.build.json`)
 * goes into a staged copy of the package in a temp folder, never into the repository's dist/. The tarball
 * is then unpacked as node_modules/lightning-ts of a clean folder beside symlinks to only the packages
 * its `dependencies` name (from this repository's node_modules, so nothing is downloaded), and
 * test/packaging/installed-check.mjs imports it by name under Node, Deno and Bun; its `agl train` loads a
 * TypeScript agent module on Node 20 through tsx once tsx is installed beside it.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { trainTasks } from "../../examples/calc/tasks.ts";
import { exportHf, loadCheckpoint } from "../../src/model/index.ts";
import { docImports } from "./public-names.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const bin = (name: string) => join(root, "node_modules/.bin", name);

interface PackReport {
  filename: string;
  files: { path: string }[];
}
interface PackageJson {
  exports: Record<string, string | { types: string; import: string }>;
  bin: Record<string, string>;
  dependencies: Record<string, string>;
}
interface InstalledReport {
  runtime: string;
  exports: Record<string, string[]>;
  store: { claimed: boolean; input: unknown };
  dashboard: { page: number; type: string | null; uplot: boolean };
  grpoAdvantages: number[];
}

/** Runs a command; a failure throws with its whole output, so the test report says what went wrong. */
function run(cmd: string, args: string[], cwd: string, timeout = 120_000): string {
  try {
    return execFileSync(cmd, args, {
      cwd,
      encoding: "utf8",
      timeout,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, NO_COLOR: "1" },
    });
  } catch (e) {
    const { stdout, stderr } = e as { stdout?: string; stderr?: string };
    throw new Error(`${cmd} ${args.join(" ")} failed in ${cwd}:\n${stdout ?? ""}\n${stderr ?? ""}`, { cause: e });
  }
}
const npmPack = (cwd: string, extra: string[]): PackReport =>
  (JSON.parse(run("npm", ["pack", "--json", "--ignore-scripts", ...extra], cwd)) as PackReport[])[0];

/** Paths that must never be published: sources of tests, benchmarks, fixtures, examples and build scripts. */
const UNPUBLISHED = [
  /(^|\/)(test|tests|bench|fixtures?|examples|scripts|assembly|checkpoints?|runs)\//,
  /\.test\.[cm]?[jt]s$/,
  /(^|\/)(embed-migrations|migration-files)\./,
  /^(src|runtimes)\//,
];

const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as PackageJson;
const subpaths = Object.entries(pkg.exports).filter((e): e is [string, { types: string; import: string }] => typeof e[1] === "object");

let work: string;
let repoListing: string[];
let tarballFiles: string[];
let app: string;

beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), "lightning-pack-"));
  repoListing = npmPack(root, ["--dry-run"]).files.map((f) => f.path);
  // Stage what the repository publishes, then a fresh build in place of whatever dist/ there is.
  const stage = join(work, "package");
  for (const path of repoListing.filter((p) => !p.startsWith("dist/"))) {
    mkdirSync(dirname(join(stage, path)), { recursive: true });
    copyFileSync(join(root, path), join(stage, path));
  }
  run(bin("tsc"), ["-p", join(root, "tsconfig.build.json"), "--outDir", join(stage, "dist")], root, 280_000);
  const packed = npmPack(stage, ["--pack-destination", work]);
  tarballFiles = packed.files.map((f) => f.path);

  app = join(work, "app");
  const installed = join(app, "node_modules/lightning-ts");
  mkdirSync(installed, { recursive: true });
  run("tar", ["-xzf", join(work, packed.filename), "-C", installed, "--strip-components=1"], work);
  for (const dep of Object.keys(pkg.dependencies)) {
    mkdirSync(dirname(join(app, "node_modules", dep)), { recursive: true });
    symlinkSync(realpathSync(join(root, "node_modules", dep)), join(app, "node_modules", dep), "dir");
  }
  writeFileSync(
    join(app, "package.json"),
    JSON.stringify({ name: "app", private: true, type: "module", dependencies: { "lightning-ts": "*" } }),
  );
  copyFileSync(join(root, "test/packaging/installed-check.mjs"), join(app, "installed-check.mjs"));
}, 300_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe("npm pack", () => {
  it("the repository publishes only dist/, bin/, the README and package.json", () => {
    expect(repoListing).toContain("package.json");
    expect(repoListing).toContain("README.md");
    for (const path of repoListing) expect(path).toMatch(/^(dist\/|bin\/|README\.md$|package\.json$|LICENSE)/);
  });

  it("the tarball holds no tests, benches, fixtures, examples or scripts", () => {
    const leaked = tarballFiles.filter((p) => UNPUBLISHED.some((re) => re.test(p)));
    expect(leaked).toEqual([]);
    // the build script that embeds migrations is not shipped; what it generated is
    expect(tarballFiles).toContain("dist/src/store/libsql/migrations/index.js");
    expect(tarballFiles).toContain("dist/src/wasm/kernels.wasm.js");
    expect(tarballFiles).toContain("dist/src/server/dashboard/assets.generated.js");
  });

  it("every entry of package.json exports and bin is in the tarball", () => {
    const targets = [...subpaths.flatMap(([, t]) => [t.types, t.import]), ...Object.values(pkg.bin)];
    expect(targets.map((t) => t.replace(/^\.\//, "")).filter((t) => !tarballFiles.includes(t))).toEqual([]);
  });
});

describe("the installed tarball", () => {
  // What each entry exports, from the sources: the built package must export exactly the same names.
  const sourceExports = async (): Promise<Record<string, string[]>> => {
    const out: Record<string, string[]> = {};
    for (const [key, target] of subpaths) {
      const source = join(root, target.import.replace(/^\.\/dist\//, "").replace(/\.js$/, ".ts"));
      out[key === "." ? "lightning-ts" : `lightning-ts${key.slice(1)}`] = Object.keys(await import(source)).sort();
    }
    return out;
  };

  const RUNTIMES: [string, string, string[]][] = [
    ["node", process.execPath, ["installed-check.mjs"]],
    ["deno", bin("deno"), ["run", "-A", "--node-modules-dir=manual", "installed-check.mjs"]],
    ["bun", bin("bun"), ["installed-check.mjs"]],
  ];
  for (const [name, cmd, args] of RUNTIMES) {
    it(`${name}: imports the root and every subpath by name, opens a libSQL file store, runs a Wasm kernel`, async () => {
      const report = JSON.parse(run(cmd, args, app).trim().split("\n").pop()!) as InstalledReport;
      expect(report.runtime).toBe(name);
      expect(report.exports).toEqual(await sourceExports());
      expect(report.store).toEqual({ claimed: true, input: { question: "2 + 2?" } });
      expect(report.dashboard).toEqual({ page: 200, type: "text/html; charset=utf-8", uplot: true });
      expect(report.grpoAdvantages[0]).toBeCloseTo(Math.SQRT1_2, 5);
      expect(report.grpoAdvantages[1]).toBeCloseTo(-Math.SQRT1_2, 5);
      expect(existsSync(join(app, `store-${name}.db`))).toBe(true);
    }, 120_000);
  }

  it("a strict TypeScript consumer type-checks against every entry's declarations and the docs' imports (skipLibCheck off, no @types/node)", () => {
    const consumer = join(work, "consumer");
    mkdirSync(consumer);
    symlinkSync(join(app, "node_modules"), join(consumer, "node_modules"), "dir");
    writeFileSync(join(consumer, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
    writeFileSync(
      join(consumer, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          module: "nodenext",
          moduleResolution: "nodenext",
          target: "es2022",
          noEmit: true,
          skipLibCheck: false,
          types: [],
        },
        files: ["main.ts"],
      }),
    );
    const specs = subpaths.map(([key]) => (key === "." ? "lightning-ts" : `lightning-ts${key.slice(1)}`));
    // and every import README.md, docs/ and examples/ write, types included, against the published declarations
    const docs = docImports().map(
      (d, i) =>
        `import { ${[...d.values, ...d.types.map((t) => `type ${t}`)].map((n) => `${n} as d${i}_${n.replace(/^type /, "")}`).join(", ")} } from "${d.spec}";\n`,
    );
    expect(docs.length).toBeGreaterThan(0);
    const all = specs.map((s, i) => `import * as m${i} from "${s}";\nexport const x${i} = m${i};\n`);
    writeFileSync(join(consumer, "main.ts"), [...all, ...docs].join(""));
    expect(run(bin("tsc"), ["-p", "."], consumer, 180_000)).toBe("");
  }, 200_000);

  it("the agl binary runs from the installed package's dist/", () => {
    const help = run(process.execPath, ["node_modules/lightning-ts/bin/agl.mjs", "store", "--help"], app);
    expect(help).toMatch(/--port/);
  });

  it("agl train from the installed package loads a TypeScript agent through tsx, and without tsx says how in one line", async () => {
    const ckpt = await loadCheckpoint(join(root, "examples/calc/checkpoint-sft"), undefined, { optimizer: false });
    await exportHf(join(app, "model"), { config: ckpt.config, params: ckpt.params });
    writeFileSync(
      join(app, "tasks.jsonl"),
      trainTasks(4, 1)
        .map((t) => `${JSON.stringify(t)}\n`)
        .join(""),
    );
    // type annotations: Node 20 cannot strip them, and the agent needs nothing but fetch
    writeFileSync(
      join(app, "my-agent.ts"),
      `interface Task { question: string; answer: number }
export default async function calc(task: Task, llm: { endpoint: string; model: string }): Promise<number> {
  const r = await fetch(\`\${llm.endpoint}/chat/completions\`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: llm.model, messages: [{ role: "user", content: task.question }], max_tokens: 6 }),
  });
  const reply = ((await r.json()) as { choices: { message: { content: string } }[] }).choices[0].message.content;
  return reply.trim() === String(task.answer) ? 1 : 0;
}
`,
    );
    const train = (out: string): string[] => [
      ...["node_modules/lightning-ts/bin/agl.mjs", "train", "--model", "model", "--agent", "./my-agent.ts", "--data", "tasks.jsonl"],
      ...["--out", out, "--steps", "1", "--batch", "2", "--group", "2", "--device", "cpu", "--no-progress"],
    ];
    const without = spawnSync(process.execPath, train("run-without"), {
      cwd: app,
      encoding: "utf8",
      env: { ...process.env, NO_COLOR: "1" },
    });
    expect(without.status).toBe(2);
    expect(without.stdout).toBe("");
    expect(without.stderr.trim().split("\n"), without.stderr).toHaveLength(1);
    expect(without.stderr).toMatch(
      /^agl train: cannot import the agent module \.\/my-agent\.ts: .*cannot load the TypeScript file .*npm i -D tsx/,
    );
    expect(existsSync(join(app, "run-without"))).toBe(false);

    symlinkSync(realpathSync(join(root, "node_modules/tsx")), join(app, "node_modules/tsx"), "dir");
    expect(run(process.execPath, train("run-tsx"), app)).toMatch(/done: 1 steps on cpu/);
    expect(JSON.parse(readFileSync(join(app, "run-tsx/progress.json"), "utf8"))).toEqual({ step: 1, checkpoint: "checkpoints/step-1" });
  }, 120_000);
});
