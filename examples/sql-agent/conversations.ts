/**
 * The SQL demo's supervised data: what each node of the agent (agent.ts) is sent, with the reply a good
 * model gives, as chat messages. Rendered through the policy's chat template these are the SFT rows of
 * the demo's model (sft.ts) and the text its tokenizer is trained on (tokenizer.ts).
 *
 * - write: the question -> the gold query in a ```sql block;
 * - check: the gold query and its result -> `THE QUERY IS CORRECT.`; a failing query and its error ->
 *   `The query fails. THE QUERY IS INCORRECT.`. The check learns to catch queries that fail, not to judge
 *   what a query means: that judgement is the `write` node's to learn, by RL;
 * - rewrite: a failing query, its error and that feedback -> the gold query.
 *
 * Failing queries are the gold one broken as a small model breaks it: a column or table renamed to one
 * that is not there, or the text cut short. Their errors are SQLite's own, read through the agent's tool.
 *
 * Copying a value from the question into the query (a city, a name, a year) is what a model this small
 * learns last: the templates have few values each, so it can first get far by reciting the frequent
 * ones. Some `write` and `rewrite` examples therefore have their values swapped for others drawn from all
 * the databases' values (`reslot`), which only copying gets right; no such question is a held-out one.
 */
import type { TemplateMessage } from "../../src/model/index.ts";
import { Rng } from "../../src/model/init.ts";
import { AGENT_LIMITS, CORRECT, checkMessages, executionText, INCORRECT, rewriteMessages, sqlBlock, writeMessages } from "./agent.ts";
import { DB_IDS, type DbId, databasePath, schemaText, tables } from "./databases.ts";
import { ReadOnlyDatabase } from "./sql-tool.ts";
import { heldOutTasks, type SqlTask } from "./tasks.ts";

export type NodeName = "write" | "check" | "rewrite";

/** The check's reply to a query that ran, and to one that failed. */
export const CHECK_PASSED = CORRECT;
export const CHECK_FAILED = `The query fails. ${INCORRECT}`;

export interface NodeExample {
  node: NodeName;
  /** System, user, and the reference reply of the assistant. */
  messages: TemplateMessage[];
}

const reply = (content: string): TemplateMessage => ({ role: "assistant", content });

/** Every column and table name of the three databases: the wrong names a broken query uses. */
const IDENTIFIERS = [...new Set(DB_IDS.flatMap((db) => tables(db).flatMap((t) => [t.name, ...t.columns.map((c) => c.split(" ")[0]!)])))];

/** The gold query broken: one identifier swapped for another, or the text cut (null when the result still runs). */
export function breakQuery(query: string, rng: Rng): string {
  if (rng.uniform() < 0.3) {
    const words = query.split(" ");
    return words.slice(0, 1 + Math.floor(rng.uniform() * (words.length - 1))).join(" ");
  }
  const spots = [...query.matchAll(/\b[a-z_]+\b/g)].filter((m) => IDENTIFIERS.includes(m[0]));
  if (spots.length === 0) return `${query} WHERE`;
  const spot = spots[Math.floor(rng.uniform() * spots.length)]!;
  const others = IDENTIFIERS.filter((x) => x !== spot[0]);
  const swapped = others[Math.floor(rng.uniform() * others.length)]!;
  return query.slice(0, spot.index) + swapped + query.slice(spot.index! + spot[0].length);
}

/** Every text value of the three databases. */
const TEXT_VALUES = [
  ...new Set(DB_IDS.flatMap((db) => tables(db).flatMap((t) => t.rows.flatMap((r) => r.filter((v): v is string => typeof v === "string"))))),
].sort();

const escapeRe = (x: string) => x.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/**
 * The task with each value its question and gold query share (a quoted text or a number, `LIMIT 1`
 * aside) swapped for another: a text for one of the databases' texts, a number for one of as many digits.
 * Null when there is no value to swap or the result is a held-out question.
 */
export function reslot(task: SqlTask, rng: Rng): SqlTask | null {
  let { question, query } = task;
  let swapped = 0;
  for (const m of task.query.matchAll(/'([^']*)'|(?<!LIMIT )\b(\d+)\b/g)) {
    const value = m[1] ?? m[2]!;
    const inQuestion = new RegExp(`(?<![\\w])${escapeRe(value)}(?![\\w])`);
    if (!inQuestion.test(question)) continue;
    let other = value;
    while (other === value)
      other =
        m[1] !== undefined
          ? TEXT_VALUES[Math.floor(rng.uniform() * TEXT_VALUES.length)]!
          : String(
              10 ** (value.length - 1) * (value.length > 1 ? 1 : 0) +
                Math.floor(rng.uniform() * 9 * 10 ** (value.length - 1)) +
                (value.length > 1 ? 0 : 1),
            );
    question = question.replace(inQuestion, other);
    query = query.replace(m[0], m[1] !== undefined ? `'${other}'` : other);
    swapped++;
  }
  if (swapped === 0 || heldOutQuestions().has(question)) return null;
  return { ...task, question, query };
}

let heldOutSet: Set<string> | null = null;
const heldOutQuestions = () => (heldOutSet ??= new Set(heldOutTasks().map((t) => t.question)));

/** Opens each database once (read-only, the agent's limits) for the data's query results. */
export class Databases {
  private readonly open = new Map<DbId, ReadOnlyDatabase>();
  constructor(private readonly dir?: string) {}
  get(db: DbId): ReadOnlyDatabase {
    let c = this.open.get(db);
    if (!c) this.open.set(db, (c = new ReadOnlyDatabase(databasePath(db, this.dir), AGENT_LIMITS)));
    return c;
  }
  close(): void {
    for (const c of this.open.values()) c.close();
    this.open.clear();
  }
}

/**
 * One example of `node` for `task`; for check and rewrite, a failing query is drawn from `rng` (tried a
 * few times: a swap that SQLite accepts is no failing query). A check example shows the gold query half
 * the time. A write or rewrite example has its values swapped (`reslot`) with probability `reslotShare`.
 */
export async function nodeExample(node: NodeName, task: SqlTask, dbs: Databases, rng: Rng, reslotShare = 0): Promise<NodeExample> {
  if (node !== "check" && reslotShare > 0 && rng.uniform() < reslotShare) task = reslot(task, rng) ?? task;
  const schema = schemaText(task.db_id);
  if (node === "write") return { node, messages: [...writeMessages(schema, task.question), reply(sqlBlock(task.query))] };
  const db = dbs.get(task.db_id);
  if (node === "check" && rng.uniform() < 0.5) {
    const execution = await executionText(db, task.query);
    return { node, messages: [...checkMessages(schema, task.question, task.query, execution), reply(CHECK_PASSED)] };
  }
  for (let attempt = 0; ; attempt++) {
    const broken = breakQuery(task.query, rng);
    const execution = await executionText(db, broken);
    if (!execution.startsWith("Error:")) {
      if (attempt < 20) continue;
      throw new Error(`sql sft: no failing variant of ${task.query}`);
    }
    return node === "check"
      ? { node, messages: [...checkMessages(schema, task.question, broken, execution), reply(CHECK_FAILED)] }
      : {
          node,
          messages: [...rewriteMessages(schema, task.question, broken, execution, CHECK_FAILED), reply(sqlBlock(task.query))],
        };
  }
}

/** The share of each node in the SFT data. */
export const NODE_MIX: ReadonlyArray<[NodeName, number]> = [
  ["write", 0.6],
  ["check", 0.25],
  ["rewrite", 0.15],
];

/** The node of a draw from NODE_MIX. */
export function drawNode(rng: Rng): NodeName {
  let u = rng.uniform();
  for (const [node, p] of NODE_MIX) {
    if (u < p) return node;
    u -= p;
  }
  return "write";
}

/** One example per task, each of a node drawn from NODE_MIX (`reslotShare`: see nodeExample). */
export async function mixedExamples(tasks: readonly SqlTask[], dbs: Databases, seed: number, reslotShare = 0): Promise<NodeExample[]> {
  const rng = new Rng(seed);
  const out: NodeExample[] = [];
  for (const t of tasks) out.push(await nodeExample(drawNode(rng), t, dbs, rng, reslotShare));
  return out;
}
