/**
 * A small offline agent: it reads an arithmetic task through a prompt template, "answers" with a
 * scripted policy (no model, no network), and emits a reward of 1 for a right answer. The policy can
 * only see the numbers the template shows it, so a template that hides the operands earns 0: the
 * reward really depends on the resource an algorithm would tune.
 */
import { trace } from "@opentelemetry/api";
import { emitReward, operation } from "../../src/tracer/index.ts";
import { promptRollout } from "../../src/runner/index.ts";
import { formatPromptTemplate, type PromptTemplate } from "../../src/types/index.ts";

export interface ArithmeticTask {
  a: number;
  b: number;
  op: "+" | "-" | "*";
  answer: number;
}

/** Deterministic tasks (a tiny LCG, so every run and runtime sees the same data). */
export function makeTasks(n: number, seed = 7): ArithmeticTask[] {
  let s = seed;
  const next = () => (s = (s * 1103515245 + 12345) % 2147483648) / 2147483648;
  const ops = ["+", "-", "*"] as const;
  return Array.from({ length: n }, () => {
    const a = Math.floor(next() * 50);
    const b = Math.floor(next() * 50);
    const op = ops[Math.floor(next() * 3)]!;
    return { a, b, op, answer: op === "+" ? a + b : op === "-" ? a - b : a * b };
  });
}

/** The scripted "model": computes the first `x op y` it can find in the prompt. */
const solve = operation(function solve(prompt: string): number | null {
  const m = /(-?\d+)\s*([+*-])\s*(-?\d+)/.exec(prompt);
  if (!m) return null;
  const [x, y] = [Number(m[1]), Number(m[3])];
  return m[2] === "+" ? x + y : m[2] === "-" ? x - y : x * y;
});

const otel = trace.getTracer("examples.arithmetic");

export const arithmeticAgent = promptRollout(async function arithmetic(task: ArithmeticTask, prompt_template: PromptTemplate) {
  // A plain OpenTelemetry span: it lands in the store with the emitted ones, nested and in order.
  return otel.startActiveSpan("arithmetic.turn", async (span) => {
    const prompt = formatPromptTemplate(prompt_template, { a: task.a, b: task.b, op: task.op });
    const answer = solve(prompt);
    emitReward(answer === task.answer ? 1 : 0);
    span.end();
  });
});

export const goodTemplate: PromptTemplate = { resource_type: "prompt_template", template: "Compute {a} {op} {b}.", engine: "f-string" };
