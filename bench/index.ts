/**
 * Runs every benchmark in `bench/` (files named `*.bench.ts` or the listed scripts), one after another,
 * each printing its figures and its ratio against a baseline measured in the same run.
 * `npm run bench -- store-memory` runs only the benchmarks whose name contains the argument; arguments
 * from the first `--flag` on go to each benchmark run (`npm run bench -- soak --minutes 1`).
 */
import { readdirSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const firstFlag = args.findIndex((a) => a.startsWith("--"));
const only = firstFlag < 0 ? args : args.slice(0, firstFlag);
const flags = firstFlag < 0 ? [] : args.slice(firstFlag);
const files = readdirSync(here)
  .filter((f) => f.endsWith(".ts") && f !== "index.ts" && !f.startsWith("_"))
  .filter((f) => only.length === 0 || only.some((o) => f.includes(o)))
  .sort();

let failed = 0;
for (const f of files) {
  console.log(`\n=== bench/${f}`);
  const r = spawnSync(process.execPath, ["--import", "tsx", join(here, f), ...flags], { stdio: "inherit" });
  if (r.status !== 0) failed++;
}
if (failed) {
  console.error(`${failed} benchmark(s) failed`);
  process.exit(1);
}
