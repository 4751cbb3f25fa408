/** The page's script bundled for the browser with esbuild (serve.ts and test/browser/training-tab.test.ts). */
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

export const here = dirname(fileURLToPath(import.meta.url));

/** `entry` (main.ts for the page; tab.ts to drive the loop from a test) as one ES module. */
export async function bundle(entry = "main.ts"): Promise<string> {
  const out = await build({
    entryPoints: [join(here, entry)],
    bundle: true,
    platform: "browser",
    format: "esm",
    target: "es2022",
    write: false,
    logLevel: "silent",
  });
  return out.outputFiles[0]!.text;
}
