#!/usr/bin/env node
// The `agl` command. A published package runs its compiled dist/; a clone (after `npm ci`, no build)
// runs the TypeScript source through tsx, a devDependency that is installed there.
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = new URL("../", import.meta.url);
const built = new URL("dist/runtimes/node.js", root);
let entry;
if (existsSync(fileURLToPath(built))) {
  entry = await import(built.href);
} else {
  let tsImport;
  try {
    ({ tsImport } = await import("tsx/esm/api"));
  } catch {
    console.error("agl: dist/ is missing and tsx is not installed: run `npm run build` (or `npm ci` in a clone) first");
    process.exit(1);
  }
  entry = await tsImport(new URL("runtimes/node.ts", root).href, import.meta.url);
}
process.exit(await entry.main(process.argv.slice(2)));
