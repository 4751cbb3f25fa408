/**
 * The SQL agent: Agent Lightning's Spider example in LangGraph.js. A graph of three model-calling nodes,
 *
 *   START -> write -> check -> (END | rewrite -> check -> ...)
 *
 * `write` writes a query for the question, `check` runs it through the read-only tool (sql-tool.ts) and
 * asks the model whether query and result answer the question, `rewrite` fixes the query from that
 * feedback; the loop ends when the check says `THE QUERY IS CORRECT.` or after MAX_TURNS queries. The
 * reward is the execution match of the last query against the gold one (reward.ts).
 *
 * The model is LangChain's ChatOpenAI pointed at the `main_llm` resource. Each node is wrapped in
 * `agentNode`, which runs it as the agent named after the node (LangGraph's own `langgraph_node`), and
 * the client's `agentNameFetch` sends that name with each call, so the policy server records which node
 * made it and `agentMatch` can train one node alone (docs/agents.md#training-only-some-agents).
 */
import { Annotation, END, type LangGraphRunnableConfig, START, StateGraph } from "@langchain/langgraph";
import { ContextOverflowError } from "@langchain/core/errors";
import { ChatOpenAI } from "@langchain/openai";
import { llmRollout } from "../../src/runner/index.ts";
import { agentNameFetch, withAgentName } from "../../src/tracer/index.ts";
import type { LLM } from "../../src/types/index.ts";
import { databasePath, type DbId, defaultDatabaseDir, schemaText } from "./databases.ts";
import { executionMatch, type Judgement } from "./reward.ts";
import { formatResult, type QueryLimits, ReadOnlyDatabase } from "./sql-tool.ts";
import type { SqlTask } from "./tasks.ts";

/** Queries written at most (the first by `write`, the others by `rewrite`), as upstream's LitSQLAgent. */
export const MAX_TURNS = 3;
/** New tokens per call: a query is at most about 60 tokens; 96 is also the training row's reply. */
export const MAX_TOKENS_PER_CALL = 96;
export const MODEL_TIMEOUT_MS = 60_000;
/** Characters of a query result shown to the model. */
export const EXECUTION_CHARS = 800;
/** The limits of the agent's own queries. */
export const AGENT_LIMITS: Partial<QueryLimits> = { timeoutMs: 2000, maxRows: 200 };

export const CORRECT = "THE QUERY IS CORRECT.";
export const INCORRECT = "THE QUERY IS INCORRECT.";

export const WRITE_PROMPT = (schema: string) =>
  `You write one SQLite query that answers the question. Use only these tables and columns:\n${schema}\nAnswer with the query in a \`\`\`sql block.`;
export const CHECK_PROMPT = (schema: string) =>
  `You check a SQLite query for mistakes: wrong tables or columns, wrong joins or filters, an error, an unlikely result. Tables:\n${schema}\nList the mistakes, then end with exactly ${CORRECT} or ${INCORRECT}`;
export const REWRITE_PROMPT = (schema: string) =>
  `You fix a SQLite query using the feedback. Use only these tables and columns:\n${schema}\nAnswer with the fixed query in a \`\`\`sql block.`;

/** A query in a ```sql block: how the prompts show a query, and how the model is asked to answer. */
export const sqlBlock = (query: string): string => `\`\`\`sql\n${query}\n\`\`\``;

type Messages = [{ role: "system"; content: string }, { role: "user"; content: string }];

/** What each node sends the model (the SFT data of the demo's model is rendered from the same). */
export const writeMessages = (schema: string, question: string): Messages => [
  { role: "system", content: WRITE_PROMPT(schema) },
  { role: "user", content: `Question: ${question}` },
];
export const checkMessages = (schema: string, question: string, query: string, execution: string): Messages => [
  { role: "system", content: CHECK_PROMPT(schema) },
  { role: "user", content: `Question: ${question}\nQuery:\n${sqlBlock(query)}\nResult:\n${execution}` },
];
export const rewriteMessages = (schema: string, question: string, query: string, execution: string, feedback: string): Messages => [
  { role: "system", content: REWRITE_PROMPT(schema) },
  { role: "user", content: `Question: ${question}\nQuery:\n${sqlBlock(query)}\nResult:\n${execution}\nFeedback:\n${feedback}` },
];

/** A query's result as the check and rewrite nodes read it (cut at EXECUTION_CHARS). */
export async function executionText(db: ReadOnlyDatabase, query: string): Promise<string> {
  const text = formatResult(await db.query(query));
  return text.length > EXECUTION_CHARS ? `${text.slice(0, EXECUTION_CHARS)}\n... (cut)` : text;
}

/** The query in the reply: the last fenced block (upstream's parse_query), or null. */
export function parseQuery(reply: string): string | null {
  let found: string | null = null;
  for (const m of reply.matchAll(/```[\w-]*\n([\s\S]*?)\n?```/g)) found = m[1]!.trim();
  return found === "" ? null : found;
}

/** Whether the check's last verdict says correct. */
export function judgedCorrect(feedback: string): boolean {
  const yes = feedback.lastIndexOf("THE QUERY IS CORRECT"),
    no = feedback.lastIndexOf("THE QUERY IS INCORRECT");
  return yes >= 0 && yes > no;
}

/** The node's name in the graph (LangGraph puts it in every node's config). */
function nodeName(config: LangGraphRunnableConfig): string {
  const name = config.metadata?.langgraph_node;
  if (typeof name !== "string") throw new Error("agentNode: run it as a LangGraph node (no langgraph_node in its config)");
  return name;
}

/** A LangGraph node run as the agent named after the node: its model calls carry the node's name. */
export function agentNode<S, U>(fn: (state: S) => Promise<U>): (state: S, config: LangGraphRunnableConfig) => Promise<U> {
  return (state, config) => withAgentName(nodeName(config), () => fn(state));
}

const SqlState = Annotation.Root({
  question: Annotation<string>(),
  query: Annotation<string>(),
  execution: Annotation<string>(),
  feedback: Annotation<string>(),
  turns: Annotation<number>(),
});
type State = typeof SqlState.State;

export interface SqlAgentOptions {
  /** Where the databases are (built there on first use) [defaultDatabaseDir()]. */
  databaseDir?: string;
  maxTurns?: number;
  /** Sampling temperature [the resource's `temperature`, else 0]. */
  temperature?: number;
}

export interface SqlAgentResult {
  /** The last query written. */
  query: string;
  /** Queries written (write + rewrites). */
  turns: number;
  /** The check's last feedback. */
  feedback: string;
  judgement: Judgement;
  reward: number;
}

/** The model a rollout talks to: the resource's endpoint, every call naming its agent. */
export function chatModel(llm: LLM, temperature?: number): ChatOpenAI {
  const t = temperature ?? (llm.sampling_parameters.temperature as number | undefined) ?? 0;
  return new ChatOpenAI({
    model: llm.model,
    apiKey: llm.api_key ?? "unused",
    temperature: t,
    maxTokens: MAX_TOKENS_PER_CALL,
    maxRetries: 0,
    timeout: MODEL_TIMEOUT_MS,
    configuration: { baseURL: llm.endpoint, fetch: agentNameFetch() },
  });
}

/** The graph over one database connection (compiled per rollout: it is cheap, and holds the connection). */
export function sqlGraph(model: ChatOpenAI, db: ReadOnlyDatabase, dbId: DbId, maxTurns = MAX_TURNS) {
  const schema = schemaText(dbId);
  const ask = async (messages: Messages): Promise<string> => {
    try {
      const reply = await model.invoke(messages);
      return typeof reply.content === "string" ? reply.content : reply.text;
    } catch (e) {
      // A long result can fill a small model's context: the node gets no reply (no verdict, no new query)
      // and the loop runs out of turns on the query it has, rather than failing the rollout.
      if (ContextOverflowError.isInstance(e)) return "";
      throw e;
    }
  };
  return new StateGraph(SqlState)
    .addNode(
      "write",
      agentNode(async (s: State) => {
        const reply = await ask(writeMessages(schema, s.question));
        return { query: parseQuery(reply) ?? reply.trim(), turns: 1 };
      }),
    )
    .addNode(
      "check",
      agentNode(async (s: State) => {
        const execution = await executionText(db, s.query);
        const feedback = await ask(checkMessages(schema, s.question, s.query, execution));
        return { execution, feedback };
      }),
    )
    .addNode(
      "rewrite",
      agentNode(async (s: State) => {
        const reply = await ask(rewriteMessages(schema, s.question, s.query, s.execution, s.feedback));
        return { query: parseQuery(reply) ?? s.query, turns: s.turns + 1 };
      }),
    )
    .addEdge(START, "write")
    .addEdge("write", "check")
    .addConditionalEdges("check", (s: State) => (judgedCorrect(s.feedback) || s.turns >= maxTurns ? END : "rewrite"), ["rewrite", END])
    .addEdge("rewrite", "check")
    .compile();
}

/** One rollout: the graph on the task's database, then the execution match of its last query. */
export async function runSqlAgent(task: SqlTask, llm: LLM, options: SqlAgentOptions = {}): Promise<SqlAgentResult> {
  const path = databasePath(task.db_id, options.databaseDir ?? defaultDatabaseDir());
  const db = new ReadOnlyDatabase(path, AGENT_LIMITS);
  try {
    const graph = sqlGraph(chatModel(llm, options.temperature), db, task.db_id, options.maxTurns ?? MAX_TURNS);
    const end = await graph.invoke({ question: task.question, query: "", execution: "", feedback: "", turns: 0 });
    const judgement = await executionMatch(db, end.query, task.query);
    return { query: end.query, turns: end.turns, feedback: end.feedback, judgement, reward: judgement.reward };
  } finally {
    db.close();
  }
}

/** The agent `agl train` runs: the reward of one rollout. */
export const sqlAgent = llmRollout(async function sqlAgent(task: SqlTask, llm: LLM) {
  return (await runSqlAgent(task, llm)).reward;
});

export default sqlAgent;
