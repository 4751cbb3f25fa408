/**
 * Replays a Calc-X run's training offline: each step's rollouts read back from the run's store (in the order
 * they were enqueued), batched and trained as `agl train` does for the demo (GRPO, LoRA on the CPU engine,
 * the demo's options: examples/calc-x/train.ts), from the same initial adapter; prints each step's grad norm
 * beside the ones the runs recorded, `=` where they agree to the bit. A run whose training is deterministic
 * agrees at every step; the first step where a run disagrees (its batch replayed the same) is where its
 * trainer computed something else than this replay does.
 *
 * Run: `npx tsx bench/calc-x-replay.ts <copy of OUT/run/store.db> <steps> [threads] [metrics.jsonl ...]`
 * (the store is written to when opened: replay a copy).
 */
import { readFileSync } from "node:fs";
import { createClient } from "@libsql/client";
import { LlmProxyTraceToTriplet } from "../src/adapter/proxy-triplet.ts";
import type { FinishedRollout } from "../src/adapter/batch.ts";
import { ppoUpdate } from "../src/algorithm/grpo-step.ts";
import { lrOf, trainerOptions } from "../src/cli/train.ts";
import { TrainConfigSchema, type FittedTrainConfig } from "../src/cli/train-config.ts";
import { CpuTrainer } from "../src/cpu/trainer.ts";
import { loadPretrained } from "../src/model/hf/loader.ts";
import { Rng } from "../src/model/init.ts";
import { openStore } from "../src/store/libsql/open.ts";
import { CALC_X_DEFAULTS, ROW_LIMITS } from "../examples/calc-x/train.ts";

const [db, stepsArg, threadsArg, ...metricFiles] = process.argv.slice(2);
if (!db || !stepsArg) throw new Error("usage: calc-x-replay.ts <store.db copy> <steps> [threads] [metrics.jsonl ...]");
const d = CALC_X_DEFAULTS;
const limits = ROW_LIMITS[d.level];
const c = TrainConfigSchema.parse({
  model: "examples/calc-x/model",
  agent: "examples/calc-x/agent.ts",
  data: "-",
  out: "-",
  steps: d.steps,
  lr: d.lr,
  lrDecayShare: d.decayShare,
  lrFinal: d.lrFinal,
  temperature: d.temperature,
  seed: d.seed,
  loraR: d.loraR,
  loraAlpha: d.loraAlpha,
}) as FittedTrainConfig;
const recorded = metricFiles.map(
  (f) =>
    new Map(
      readFileSync(f, "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as { kind: string; step: number; grad_norm: number })
        .filter((r) => r.kind === "step")
        .map((r) => [r.step, r.grad_norm]),
    ),
);

const model = await loadPretrained(c.model);
const trainer = new CpuTrainer({ ...trainerOptions(c, model), threads: Number(threadsArg ?? 2) });
const sql = createClient({ url: `file:${db}` });
const store = await openStore(`file:${db}`);
const adapter = new LlmProxyTraceToTriplet();
const shuffle = new Rng(0);
try {
  for (let step = 1; step <= Number(stepsArg); step++) {
    const rows = await sql.execute({
      sql: "select rollout_id, json_extract(metadata, '$.data_id') as data_id from rollouts where json_extract(metadata, '$.data_id') like ? order by rowid",
      args: [`s${step}-%`],
    });
    const finished: FinishedRollout[] = [];
    for (const r of rows.rows) {
      const spans = (await store.querySpans(String(r.rollout_id), { attempt_id: "latest" })).items;
      finished.push({
        rollout_id: String(r.rollout_id),
        data_id: String(r.data_id),
        triplets: spans.length > 0 ? adapter.adapt(spans) : [],
      });
    }
    const u = await ppoUpdate(trainer, finished, {
      maxPromptLength: limits.maxPrompt,
      maxResponseLength: limits.maxResponse,
      traceAggregator: { level: d.level },
      temperature: c.temperature,
      trackKl: true,
      lr: lrOf(c, step, c.steps),
      shuffle,
    });
    const g = u.metrics?.grad_norm;
    console.log([step, g, ...recorded.map((m) => `${m.get(step)}${m.get(step) === g ? " =" : ""}`)].join("\t"));
  }
} finally {
  trainer.close();
  await store.close();
  sql.close();
}
