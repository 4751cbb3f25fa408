/**
 * Arithmetic word problems generated in code: seeded, short (the policy reads bytes), with a fixed
 * held-out set that never appears in training. Three kinds: addition (operands 0..12), subtraction
 * (non-negative results, operands up to 20) and multiplication (factors 1..6). The wording is terse
 * because every byte costs a position in a small CPU-trained model.
 */
import { Rng } from "../../src/model/init.ts";

export interface CalcTask {
  question: string;
  answer: number;
  /** The operation and its operands (for teachers and analysis; the agent sees only the question). */
  op: "+" | "-" | "*";
  a: number;
  b: number;
}

const NAMES = ["Ann", "Bob", "Sam", "Eva", "Tom", "Mia"];
const ITEMS = ["pens", "cards", "coins", "eggs", "stamps", "books"];

const pick = <T>(rng: Rng, xs: readonly T[]): T => xs[Math.floor(rng.uniform() * xs.length)]!;
const int = (rng: Rng, lo: number, hi: number): number => lo + Math.floor(rng.uniform() * (hi - lo + 1));

/** One problem drawn from `rng`. */
export function drawTask(rng: Rng): CalcTask {
  const name = pick(rng, NAMES);
  const item = pick(rng, ITEMS);
  const kind = int(rng, 0, 2);
  if (kind === 0) {
    const a = int(rng, 0, 12),
      b = int(rng, 0, 12);
    return { question: `${name} has ${a} ${item}, gets ${b}. Total?`, answer: a + b, op: "+", a, b };
  }
  if (kind === 1) {
    const a = int(rng, 0, 20),
      b = int(rng, 0, a);
    return { question: `${name} has ${a} ${item}, loses ${b}. Left?`, answer: a - b, op: "-", a, b };
  }
  const a = int(rng, 1, 6),
    b = int(rng, 1, 6);
  return { question: `${name} has ${a} bags of ${b} ${item}. Total?`, answer: a * b, op: "*", a, b };
}

export const HELD_OUT_SEED = 1001;

/** The held-out problems (distinct questions). */
export function heldOutTasks(n = 100): CalcTask[] {
  const rng = new Rng(HELD_OUT_SEED);
  const seen = new Set<string>();
  const out: CalcTask[] = [];
  while (out.length < n) {
    const t = drawTask(rng);
    if (seen.has(t.question)) continue;
    seen.add(t.question);
    out.push(t);
  }
  return out;
}

/** `n` training problems from `seed`, none of them a held-out question. */
export function trainTasks(n: number, seed: number, heldOut: readonly CalcTask[] = heldOutTasks()): CalcTask[] {
  const banned = new Set(heldOut.map((t) => t.question));
  const rng = new Rng(seed);
  const out: CalcTask[] = [];
  while (out.length < n) {
    const t = drawTask(rng);
    if (!banned.has(t.question)) out.push(t);
  }
  return out;
}

/** The answer the reply states: its first integer (null when there is none). */
export function parseAnswer(reply: string): number | null {
  const m = /-?\d+/.exec(reply);
  return m ? Number(m[0]) : null;
}

/** 1 for a correct final answer, else 0. */
export function reward(task: CalcTask, reply: string): number {
  return parseAnswer(reply) === task.answer ? 1 : 0;
}
