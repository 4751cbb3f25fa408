/**
 * The SQL agent (examples/sql-agent/agent.ts, LangGraph.js) against a scripted OpenAI-compatible model:
 * write -> check says correct; write -> check -> rewrite -> check; the turn limit; a hostile query from
 * the model (a tool error, the database untouched); through the LLM proxy into a store, LLM-call spans
 * named after the graph's nodes, of which `agentMatch` keeps exactly the `write` node's; and a whole
 * rollout against the real policy server (a tiny random model: every query fails, the loop runs out).
 */
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  CHECK_PROMPT,
  CORRECT,
  INCORRECT,
  judgedCorrect,
  MAX_TURNS,
  parseQuery,
  runSqlAgent,
  WRITE_PROMPT,
} from "../../examples/sql-agent/agent.ts";
import { databasePath, schemaText, tables } from "../../examples/sql-agent/databases.ts";
import type { SqlTask } from "../../examples/sql-agent/tasks.ts";
import { LlmProxyTraceToTriplet } from "../../src/adapter/index.ts";
import { initParams, presetConfig } from "../../src/model/index.ts";
import { LLM_CALL_SPAN_NAME, LLMProxy, ModelPolicy, PolicyServer } from "../../src/proxy/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import type { LLM } from "../../src/types/index.ts";
import { chatAnswer, type ScriptedUpstream, startScriptedUpstream } from "../proxy/scripted-upstream.ts";

const TASK: SqlTask = {
  id: "t1",
  db_id: "shop",
  question: "How many customers live in Lyon?",
  query: "SELECT COUNT(*) FROM customers WHERE city = 'Lyon'",
};
const RIGHT = "SELECT COUNT(*) FROM customers WHERE city = 'Lyon'";
const WRONG = "SELECT COUNT(*) FROM customers WHERE city = 'Oslo'";

const sql = (q: string) => `Here it is:\n\`\`\`sql\n${q}\n\`\`\``;
let ids = 0;
/** A scripted reply with vLLM-style token ids, so the proxy's spans become triplets. */
const reply = (content: string) => ({
  kind: "json" as const,
  body: chatAnswer(content, {
    prompt_token_ids: [1, 2, ++ids],
    choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop", token_ids: [7, ids] }],
  }),
});

let upstream: ScriptedUpstream;
let dir: string;
let llm: LLM;
beforeAll(async () => {
  upstream = await startScriptedUpstream();
  dir = mkdtempSync(join(tmpdir(), "sql-agent-"));
  llm = { resource_type: "llm", endpoint: upstream.url, model: "scripted", api_key: null, sampling_parameters: { temperature: 0.7 } };
});
afterEach(() => {
  upstream.script.length = 0;
  upstream.received.length = 0;
});
afterAll(async () => {
  await upstream.stop();
  rmSync(dir, { recursive: true, force: true });
});

const agents = () => upstream.received.map((r) => r.headers["x-agent-name"]);
const userText = (i: number) => (upstream.received[i]!.body.messages as { content: string }[])[1]!.content;

describe("the SQL agent", () => {
  it("writes a query, checks it, and stops when the check says it is correct", async () => {
    upstream.script.push(reply(sql(RIGHT)), reply(`No mistakes.\n${CORRECT}`));
    const r = await runSqlAgent(TASK, llm, { databaseDir: dir });
    expect(r).toMatchObject({ query: RIGHT, turns: 1, reward: 1, judgement: { reward: 1, reason: null } });
    expect(agents()).toEqual(["write", "check"]);
    const first = upstream.received[0]!.body;
    expect(first.model).toBe("scripted");
    expect(first.temperature).toBe(0.7);
    expect(first.messages).toEqual([
      { role: "system", content: WRITE_PROMPT(schemaText("shop")) },
      { role: "user", content: `Question: ${TASK.question}` },
    ]);
    // the check sees the query and what it returned
    const lyon = tables("shop")[0]!.rows.filter((row) => row[2] === "Lyon").length;
    expect((upstream.received[1]!.body.messages as { content: string }[])[0]!.content).toBe(CHECK_PROMPT(schemaText("shop")));
    expect(userText(1)).toBe(`Question: ${TASK.question}\nQuery:\n\`\`\`sql\n${RIGHT}\n\`\`\`\nResult:\nCOUNT(*)\n${lyon}`);
  });

  it("rewrites a query the check finds wrong, from the check's feedback, and checks it again", async () => {
    upstream.script.push(
      reply(sql(WRONG)),
      reply(`The city should be Lyon.\n${INCORRECT}`),
      reply(sql(RIGHT)),
      reply(`${INCORRECT} ... on second thought ${CORRECT}`),
    );
    const r = await runSqlAgent(TASK, llm, { databaseDir: dir });
    expect(r).toMatchObject({ query: RIGHT, turns: 2, reward: 1 });
    expect(agents()).toEqual(["write", "check", "rewrite", "check"]);
    expect(userText(2)).toContain(`Query:\n\`\`\`sql\n${WRONG}\n\`\`\``);
    expect(userText(2)).toContain(`Feedback:\nThe city should be Lyon.\n${INCORRECT}`);
    expect(userText(3)).toContain(RIGHT);
  });

  it(`stops after ${MAX_TURNS} queries, and scores the last one`, async () => {
    upstream.script.push(
      reply(sql(RIGHT)),
      reply(INCORRECT),
      reply(sql(RIGHT)),
      reply("Hmm."),
      reply("no block, keep the query"),
      reply(INCORRECT),
    );
    const r = await runSqlAgent(TASK, llm, { databaseDir: dir });
    expect(agents()).toEqual(["write", "check", "rewrite", "check", "rewrite", "check"]);
    expect(r).toMatchObject({ query: RIGHT, turns: MAX_TURNS, reward: 1, feedback: INCORRECT });
  });

  it("runs out of turns on the query it has when the check's or rewrite's prompt fills the model's context", async () => {
    const overflow = {
      kind: "json" as const,
      status: 400,
      body: {
        error: {
          message: "This model's maximum context length is 512 tokens; the request asks for 514",
          type: "invalid_request_error",
          param: "messages",
          code: "context_length_exceeded",
        },
      },
    };
    upstream.script.push(reply(sql(RIGHT)), overflow, overflow, overflow, overflow, overflow);
    const r = await runSqlAgent(TASK, llm, { databaseDir: dir });
    expect(agents()).toEqual(["write", "check", "rewrite", "check", "rewrite", "check"]);
    expect(r).toMatchObject({ query: RIGHT, turns: MAX_TURNS, reward: 1, feedback: "" });
  });

  it("fails the rollout on any other model error", async () => {
    upstream.script.push(reply(sql(RIGHT)), { kind: "json", status: 400, body: { error: { message: "bad request", code: "invalid" } } });
    await expect(runSqlAgent(TASK, llm, { databaseDir: dir })).rejects.toThrow(/bad request/);
  });

  it("turns a hostile or broken query into a tool error the check reads, leaves the database as it was, and scores 0", async () => {
    const path = databasePath("shop", dir);
    const before = createHash("sha256").update(readFileSync(path)).digest("hex");
    upstream.script.push(
      reply(sql("DELETE FROM customers")),
      reply(INCORRECT),
      reply(sql("SELECT 1; DROP TABLE customers")),
      reply(INCORRECT),
      reply(sql("SELECT COUNT(*) FROM customers WHERE town = 'Lyon'")),
      reply(INCORRECT),
    );
    const r = await runSqlAgent(TASK, llm, { databaseDir: dir });
    expect(userText(1)).toContain("Result:\nError: only read-only SELECT queries may be run (this one starts with DELETE)");
    expect(userText(3)).toContain("Result:\nError: only one SQL statement may be run at a time");
    expect(userText(5)).toContain("Result:\nError: no such column: town");
    expect(r).toMatchObject({ reward: 0, judgement: { reason: "no such column: town" } });
    expect(createHash("sha256").update(readFileSync(path)).digest("hex")).toBe(before);
  });

  it("reads the query out of the reply and the verdict out of the feedback", () => {
    expect(parseQuery("```sql\nSELECT 1\n```\nthen\n```\nSELECT 2\n```")).toBe("SELECT 2");
    expect(parseQuery("SELECT 3")).toBeNull();
    expect(judgedCorrect(`x ${CORRECT}`)).toBe(true);
    expect(judgedCorrect(`${CORRECT} but no: ${INCORRECT}`)).toBe(false);
    expect(judgedCorrect("looks fine")).toBe(false);
  });

  it("names each LLM-call span after its graph node, and agentMatch keeps exactly the write node's calls", async () => {
    const store = new InMemoryLightningStore();
    const proxy = new LLMProxy({ models: [{ name: "scripted", upstreams: [upstream.url] }], store });
    await proxy.start();
    try {
      const { rollout_id, attempt } = await store.startRollout(TASK);
      const routed = proxy.asResource({ rolloutId: rollout_id, attemptId: attempt.attempt_id, model: "scripted" }) as LLM;
      upstream.script.push(reply(sql(WRONG)), reply(INCORRECT), reply(sql(RIGHT)), reply(CORRECT));
      const r = await runSqlAgent(TASK, routed, { databaseDir: dir });
      expect(r.reward).toBe(1);
      const spans = (await store.querySpans(rollout_id)).items.filter((s) => s.name === LLM_CALL_SPAN_NAME);
      expect(spans.sort((a, b) => a.sequence_id - b.sequence_id).map((s) => s.attributes["gen_ai.agent.name"])).toEqual([
        "write",
        "check",
        "rewrite",
        "check",
      ]);
      const all = new LlmProxyTraceToTriplet().adapt(spans);
      expect(all.map((t) => t.metadata.agent_name)).toEqual(["write", "check", "rewrite", "check"]);
      const write = new LlmProxyTraceToTriplet({ agentMatch: "^write$" }).adapt(spans);
      expect(write).toHaveLength(1);
      expect(write[0]!.metadata.agent_name).toBe("write");
      expect(write[0]!.response.token_ids).toEqual(all[0]!.response.token_ids);
      // Agent Lightning's own pattern for this example, "write", also trains the rewrite node
      expect(new LlmProxyTraceToTriplet({ agentMatch: "write" }).adapt(spans).map((t) => t.metadata.agent_name)).toEqual([
        "write",
        "rewrite",
      ]);
    } finally {
      await proxy.stop();
    }
  });

  it("runs against the real policy server: token ids on every node's call, the write node's alone kept", async () => {
    const config = { ...presetConfig("tiny"), d_model: 32, n_layers: 1, d_ff: 64, max_seq_len: 2048 };
    const store = new InMemoryLightningStore();
    const server = new PolicyServer({ policy: new ModelPolicy({ model: "tiny", config, params: initParams(config, 1), seed: 3 }), store });
    await server.start();
    try {
      const { rollout_id, attempt } = await store.startRollout(TASK);
      const routed = server.asResource({
        rolloutId: rollout_id,
        attemptId: attempt.attempt_id,
        samplingParameters: { temperature: 1 },
      }) as LLM;
      const r = await runSqlAgent(TASK, routed, { databaseDir: dir });
      expect(r.reward).toBe(0);
      expect(r.turns).toBe(MAX_TURNS);
      const spans = (await store.querySpans(rollout_id)).items.filter((s) => s.name === LLM_CALL_SPAN_NAME);
      expect(spans.sort((a, b) => a.sequence_id - b.sequence_id).map((s) => s.attributes["gen_ai.agent.name"])).toEqual([
        "write",
        "check",
        "rewrite",
        "check",
        "rewrite",
        "check",
      ]);
      const all = new LlmProxyTraceToTriplet().adapt(spans);
      expect(all).toHaveLength(6);
      for (const t of all) expect(t.response.token_ids.length).toBeGreaterThan(0);
      const write = new LlmProxyTraceToTriplet({ agentMatch: "^write$" }).adapt(spans);
      expect(write.map((t) => t.response.token_ids)).toEqual([all[0]!.response.token_ids]);
    } finally {
      await server.stop();
    }
  }, 120_000);
});
