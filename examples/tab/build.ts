/**
 * Builds the static page once: main.js (the page) and worker.js (the training loop) bundled for the
 * browser with esbuild, next to index.html, uPlot's stylesheet, the calc demo's checkpoint and the Calc-X
 * model folder (calc-x/: config, weights and tokenizer, as examples/calc-x/model holds them). The
 * folder needs nothing but a static file server (serve.ts is one; any other host works).
 *
 *   npx tsx examples/tab/build.ts [--out DIR]     # default examples/tab/dist
 */
import { copyFile, mkdir, readFile, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { CALC_X_FILES } from "./agents.ts";

const here = dirname(fileURLToPath(import.meta.url));
export const DEFAULT_OUT = join(here, "dist");
/** The starting policy: the calc demo's SFT checkpoint. */
export const CHECKPOINT = resolve(here, "../calc/checkpoint-sft/model.safetensors");
/** The Calc-X agent's starting policy: its SFT model folder. */
export const CALC_X_MODEL = resolve(here, "../calc-x/model");

/** Writes the page into `out` and returns the folder. */
export async function buildTab(out = DEFAULT_OUT): Promise<string> {
  await mkdir(out, { recursive: true });
  await build({
    entryPoints: { main: join(here, "main.ts"), worker: join(here, "worker.ts") },
    outdir: out,
    bundle: true,
    platform: "browser",
    format: "esm",
    target: "es2022",
    // Whitespace and syntax only: function agents are matched by their parameter names (task, llm).
    minifyWhitespace: true,
    minifySyntax: true,
    keepNames: true,
    sourcemap: "linked",
    logLevel: "warning",
  });
  const uplotCss = join(dirname(createRequire(import.meta.url).resolve("uplot")), "uPlot.min.css");
  await copyFile(uplotCss, join(out, "uPlot.min.css"));
  await copyFile(CHECKPOINT, join(out, "model.safetensors"));
  await mkdir(join(out, "calc-x"), { recursive: true });
  for (const f of CALC_X_FILES) await copyFile(join(CALC_X_MODEL, f), join(out, "calc-x", f));
  await writeFile(join(out, "index.html"), await readFile(join(here, "index.html")));
  return out;
}

const argv = (globalThis as { process?: { argv: string[] } }).process?.argv ?? [];
if ((argv[1] ?? "").endsWith("examples/tab/build.ts")) {
  const at = argv.indexOf("--out");
  console.log(`built ${await buildTab(at > 0 ? resolve(argv[at + 1]!) : DEFAULT_OUT)}`);
}
