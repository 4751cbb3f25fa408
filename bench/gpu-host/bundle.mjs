// Bundles the WebGPU and CPU benchmarks into one .mjs file each (node_modules does not travel to the GPU host).
// Three runtime-resolved imports are rewritten at build time, so src/ stays as it is:
// - src/platform/index.ts imports its runtime's file through a variable (for browser bundlers): Node's becomes literal;
// - src/gpu/navigator.ts imports `webgpu` through a variable: it becomes the package's own index.js, bundled,
//   loading dawn.node from $LIGHTNING_DAWN_NODE when set (else the package's usual path beside the bundle);
// - bench/hf.ts re-runs itself under `--import tsx`: a bundle re-runs as it is.
// Usage: node bench/gpu-host/bundle.mjs OUTDIR
import { build } from "esbuild";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const outdir = resolve(process.argv[2] ?? join(root, ".gpukit/bundles"));
const BENCHES = ["gpu", "lora", "generate", "hf", "cpu", "cpu-engine"];

/** file (relative to the repo root) -> [text to find, replacement]; a missing text fails the build. */
const PATCHES = {
  "src/platform/index.ts": [["import(/* @vite-ignore */ NODE)", 'import("./node.ts")']],
  "src/gpu/navigator.ts": [["import(NODE_WEBGPU)", 'import("webgpu")']],
  "bench/hf.ts": [[/"--import",\s*"tsx",/, ""]],
  "node_modules/webgpu/index.js": [["const dawnNodePath = join(", "const dawnNodePath = process.env.LIGHTNING_DAWN_NODE || join("]],
};

const patchPlugin = {
  name: "gpu-host-patches",
  setup(b) {
    b.onResolve({ filter: /^webgpu$/ }, () => ({ path: join(root, "node_modules/webgpu/index.js") }));
    b.onLoad({ filter: /\.(ts|js)$/ }, (args) => {
      const rel = args.path.startsWith(root) ? args.path.slice(root.length + 1) : args.path;
      const patches = PATCHES[rel];
      if (!patches) return undefined;
      let text = readFileSync(args.path, "utf8");
      for (const [find, replace] of patches) {
        const next = text.replace(find, replace);
        if (next === text) throw new Error(`${rel}: ${find} not found; update bench/gpu-host/bundle.mjs`);
        text = next;
      }
      return { contents: text, loader: rel.endsWith(".ts") ? "ts" : "js" };
    });
  },
};

await build({
  entryPoints: Object.fromEntries(BENCHES.map((n) => [n, join(root, `bench/${n}.ts`)])),
  outdir,
  outExtension: { ".js": ".mjs" },
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  // bundled CommonJS dependencies call require() for Node's builtins
  banner: { js: 'import { createRequire as __cr } from "node:module"; const require = __cr(import.meta.url);' },
  plugins: [patchPlugin],
  logLevel: "warning",
});
console.log(`bundled ${BENCHES.join(", ")} into ${outdir}`);
