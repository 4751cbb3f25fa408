/** A Calc-X task: a word problem whose exact answer needs the calculator, once or twice. */
export interface CalcXTask {
  id: string;
  question: string;
  /** The exact answer as a plain decimal string (integers in the generated tasks). */
  answer: string;
  /** Tool calls the reference solution makes. */
  calls: 1 | 2;
  /** The reference solution's calculator inputs, in order. */
  expressions: string[];
}
