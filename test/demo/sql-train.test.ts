/**
 * A shortened run of the SQL demo (examples/sql-agent/train.ts): `agl train --agent-match '^write$'`
 * with LoRA-GRPO on the committed SFT model, through the real stack (runners, the LangGraph.js agent
 * with its write / check / rewrite nodes, the policy server, the embedded libSQL store, the CPU trainer).
 * It asserts what the demo shows: only the write node's calls become training rows, the held-out
 * validations are reported, and the adapter serves the write node's calls alone.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { SQL_COMMAND, trainSql } from "../../examples/sql-agent/train.ts";
import { heldOutTasks, trainTasks } from "../../examples/sql-agent/tasks.ts";
import { agentName } from "../../src/adapter/agent-name.ts";
import { FlagError } from "../../src/cli/flags.ts";
import { parseScriptArgs } from "../../src/cli/script-options.ts";
import { LLM_CALL_SPAN_NAME } from "../../src/proxy/llm-span.ts";
import { openStore } from "../../src/store/index.ts";

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe("SQL demo, shortened", () => {
  it("trains the write node alone, reports each validation, and serves the adapter to write calls only", async () => {
    const out = await mkdtemp(join(tmpdir(), "sql-demo-"));
    dirs.push(out);
    const [batch, group, steps] = [2, 4, 2];
    const r = await trainSql({
      steps,
      batch,
      group,
      valEvery: 1,
      runners: 4,
      seed: 3,
      out,
      trainSet: trainTasks(batch * steps, 5),
      valSet: heldOutTasks().slice(0, 4),
    });
    expect(r.code).toBe(0);

    // one validation before training and one after each step, each over the 4 held-out questions
    expect(r.validations.map((v) => v.step)).toEqual([0, 1, 2]);
    for (const v of r.validations) {
      expect(v.n).toBe(4);
      expect(v.accuracy).toBeGreaterThanOrEqual(0);
      expect(v.accuracy).toBeLessThanOrEqual(1);
    }

    // every rollout calls write once and check at least once; only the write calls become rows
    const reports = (await readFile(join(out, "run", "metrics.jsonl"), "utf8"))
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { kind: string; rows: number });
    const stepReports = reports.filter((x) => x.kind === "step");
    expect(stepReports).toHaveLength(steps);
    for (const s of stepReports) expect(s.rows).toBe(batch * group);
    const store = await openStore(`file:${join(out, "run", "store.db")}`);
    try {
      const training = (await store.queryRollouts({ mode_in: ["train"], limit: -1 })).items;
      expect(training).toHaveLength(batch * group * steps);
      const calls: Record<string, number> = {};
      for (const rollout of training)
        for (const s of (await store.querySpans(rollout.rollout_id, { attempt_id: "latest" })).items)
          if (s.name === LLM_CALL_SPAN_NAME) calls[agentName(s) ?? "(none)"] = (calls[agentName(s) ?? "(none)"] ?? 0) + 1;
      expect(calls.write).toBe(batch * group * steps);
      expect(calls.check).toBeGreaterThanOrEqual(batch * group * steps);
      expect(Object.keys(calls).every((k) => ["write", "check", "rewrite"].includes(k))).toBe(true);
    } finally {
      await store.close();
    }

    // the validation after training: the adapter served every write call and no check or rewrite call
    const after = r.after!;
    expect(after.rollouts).toBe(4);
    expect(after.callsPerRollout.write).toBe(1);
    expect(after.callsPerRollout.check).toBeGreaterThanOrEqual(1);
    expect(after.adapterShare.write).toBe(1);
    expect(after.adapterShare.check).toBe(0);
    if (after.adapterShare.rewrite !== undefined) expect(after.adapterShare.rewrite).toBe(0);
  }, 300_000);

  it("parses its command line with the agl flag parser: defaults, and errors that name the flag", () => {
    const parse = (argv: string[]) => parseScriptArgs(SQL_COMMAND, argv);
    expect(parse(["--help"]).help).toBe(true);
    expect(parse(["--steps", "3", "--agent-match", "^rewrite$"]).options).toEqual({ steps: 3, agentMatch: "^rewrite$" });
    expect(() => parse(["--steps", "0"])).toThrow(/--steps/);
    expect(() => parse(["--device", "tpu"])).toThrow(FlagError);
  });
});
