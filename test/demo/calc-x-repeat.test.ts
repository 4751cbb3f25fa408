/**
 * The Calc-X demo with one seed, twice: the multi-turn agent's runners answer concurrently and write
 * tool and annotation spans between their model calls, yet both runs sample the same conversations,
 * take the same steps and save the same adapter, bit for bit.
 */
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { trainCalcX } from "../../examples/calc-x/train.ts";

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

/** Every file under `dir` by its relative path. */
async function filesUnder(dir: string): Promise<Map<string, Buffer>> {
  const out = new Map<string, Buffer>();
  for (const e of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!e.isFile()) continue;
    const path = join(e.parentPath, e.name);
    out.set(relative(dir, path), await readFile(path));
  }
  return out;
}

/** The step and validation reports without their clock readings. */
async function reportsWithoutTimes(run: string): Promise<unknown[]> {
  const lines = (await readFile(join(run, "metrics.jsonl"), "utf8")).trim().split("\n");
  return lines.map((l) => Object.fromEntries(Object.entries(JSON.parse(l)).filter(([k]) => !/time|seconds|_s$|_ms$|per_s/.test(k))));
}

async function run(): Promise<{ reports: unknown[]; checkpoints: Map<string, Buffer> }> {
  const out = await mkdtemp(join(tmpdir(), "calc-x-repeat-"));
  dirs.push(out);
  const r = await trainCalcX({ steps: 3, batch: 4, group: 4, temperature: 1, valTasks: 4, valEvery: 3, runners: 4, seed: 2, out });
  expect(r.code).toBe(0);
  const checkpoints = await filesUnder(join(out, "run", "checkpoints"));
  return { reports: await reportsWithoutTimes(join(out, "run")), checkpoints };
}

describe("Calc-X demo, same seed twice", () => {
  it("takes the same steps and saves the same adapter bytes", async () => {
    const a = await run();
    const b = await run();
    expect(b.reports).toEqual(a.reports);
    expect(a.checkpoints.size).toBeGreaterThan(0);
    expect([...b.checkpoints.keys()].sort()).toEqual([...a.checkpoints.keys()].sort());
    for (const [path, bytes] of a.checkpoints) expect(b.checkpoints.get(path)!.equals(bytes), path).toBe(true);
  }, 900_000);
});
