/**
 * Calc-X word problems generated in code: seeded, short (a tiny model reads them), with numbers of 2-4
 * digits (too large for the model to work out itself), integer answers, and a fixed held-out set that
 * never appears in training. Eight templates: four need one calculator call, four need two, the second
 * using the first's result ("23 boxes of 148 pens, 517 sold. How many left?" -> `23*148`, `3404-517`).
 * Each task carries the reference solution's calculator inputs; `referenceResults` evaluates them exactly.
 */
import { Rng } from "../../src/model/init.ts";
import type { CalcXTask } from "./types.ts";

const NAMES = ["Ann", "Bob", "Sam", "Eva", "Tom", "Mia"];
const ITEMS = ["pens", "cards", "coins", "eggs", "stamps", "books"];

const pick = <T>(rng: Rng, xs: readonly T[]): T => xs[Math.floor(rng.uniform() * xs.length)]!;
const int = (rng: Rng, lo: number, hi: number): number => lo + Math.floor(rng.uniform() * (hi - lo + 1));

type Drawn = Omit<CalcXTask, "id">;

/** The templates, each drawing its numbers from `rng`; answers are integers well inside 2^53. */
const TEMPLATES: ((rng: Rng, name: string, item: string) => Drawn)[] = [
  // one call
  (rng, name, item) => {
    const a = int(rng, 12, 99),
      b = int(rng, 12, 999);
    return one(`${name} packs ${a} boxes of ${b} ${item}. How many ${item}?`, `${a}*${b}`, a * b);
  },
  (rng, name, item) => {
    const a = int(rng, 100, 9999),
      b = int(rng, 100, 9999);
    return one(`${name} has ${a} ${item} and gets ${b} more. How many now?`, `${a}+${b}`, a + b);
  },
  (rng, name, item) => {
    const a = int(rng, 1000, 9999),
      b = int(rng, 100, a - 1);
    return one(`${name} had ${a} ${item} and gave away ${b}. How many left?`, `${a}-${b}`, a - b);
  },
  (rng, _name, item) => {
    const b = int(rng, 12, 48),
      q = int(rng, 11, 199);
    return one(`${b * q} ${item} are shared by ${b} kids. How many each?`, `${b * q}/${b}`, q);
  },
  // two calls, the second on the first's result
  (rng, _name, item) => {
    const a = int(rng, 12, 99),
      b = int(rng, 12, 999),
      c = int(rng, 10, Math.min(9999, a * b - 1));
    return two(`${a} boxes of ${b} ${item}, ${c} sold. How many left?`, [a, "*", b], "-", c);
  },
  (rng, name, item) => {
    const a = int(rng, 12, 99),
      b = int(rng, 12, 999),
      c = int(rng, 10, 9999);
    return two(`${name} buys ${a} packs of ${b} ${item} and ${c} more. How many ${item}?`, [a, "*", b], "+", c);
  },
  (rng, name, _item) => {
    const a = int(rng, 12, 999),
      b = int(rng, 12, 99),
      c = int(rng, 10, Math.min(9999, a * b - 1));
    return two(`${name} earns ${a} a day for ${b} days and spends ${c}. How much is left?`, [a, "*", b], "-", c);
  },
  (rng, _name, item) => {
    const c = int(rng, 12, 48),
      q = int(rng, 11, 199),
      a = int(rng, 10, c * q - 10);
    return two(`${a} ${item} and ${c * q - a} ${item} are shared by ${c} kids. How many each?`, [a, "+", c * q - a], "/", c);
  },
];

function one(question: string, expression: string, answer: number): Drawn {
  return { question, answer: String(answer), calls: 1, expressions: [expression] };
}

function two(question: string, [a, op1, b]: [number, Op, number], op2: Op, c: number): Drawn {
  const first = apply(op1, BigInt(a), BigInt(b));
  return {
    question,
    answer: String(apply(op2, first, BigInt(c))),
    calls: 2,
    expressions: [`${a}${op1}${b}`, `${first}${op2}${c}`],
  };
}

type Op = "+" | "-" | "*" | "/";

function apply(op: Op, a: bigint, b: bigint): bigint {
  if (op === "+") return a + b;
  if (op === "-") return a - b;
  if (op === "*") return a * b;
  if (b === 0n || a % b !== 0n) throw new RangeError(`calc-x tasks: ${a}/${b} is not an integer`);
  return a / b;
}

/** One problem drawn from `rng` (half the templates need two calls). */
export function drawTask(rng: Rng): Drawn {
  const template = pick(rng, TEMPLATES);
  return template(rng, pick(rng, NAMES), pick(rng, ITEMS));
}

export const HELD_OUT_SEED = 3001;

/** The held-out problems (distinct questions, always the same ones). */
export function heldOutTasks(n = 100): CalcXTask[] {
  const rng = new Rng(HELD_OUT_SEED);
  const seen = new Set<string>();
  const out: CalcXTask[] = [];
  while (out.length < n) {
    const t = drawTask(rng);
    if (seen.has(t.question)) continue;
    seen.add(t.question);
    out.push({ id: `heldout-${out.length}`, ...t });
  }
  return out;
}

/** How many held-out questions the train split keeps out (the largest held-out set anyone evaluates on). */
export const HELD_OUT_RESERVE = 1000;

/** `n` training problems from `seed`, none of them among the first HELD_OUT_RESERVE held-out questions. */
export function trainTasks(n: number, seed: number): CalcXTask[] {
  const banned = heldOutQuestions();
  const rng = new Rng(seed);
  const out: CalcXTask[] = [];
  while (out.length < n) {
    const t = drawTask(rng);
    if (!banned.has(t.question)) out.push({ id: `train-${seed}-${out.length}`, ...t });
  }
  return out;
}

let bannedCache: Set<string> | null = null;
const heldOutQuestions = (): Set<string> => (bannedCache ??= new Set(heldOutTasks(HELD_OUT_RESERVE).map((t) => t.question)));

/**
 * The exact value of one reference expression (`<int><op><int>`, the only shape the tasks use), as the
 * calculator prints it: a plain integer string. Throws on any other shape.
 */
export function evaluateReference(expression: string): string {
  const m = /^(-?\d+)([-+*/])(\d+)$/.exec(expression);
  if (!m) throw new SyntaxError(`calc-x tasks: not a reference expression: ${JSON.stringify(expression)}`);
  return String(apply(m[2] as Op, BigInt(m[1]!), BigInt(m[3]!)));
}

/** The calculator's results for the task's reference expressions, in order (the last one is the answer). */
export function referenceResults(task: CalcXTask): string[] {
  return task.expressions.map(evaluateReference);
}
