/**
 * The Calc-X calculator: an exact arithmetic evaluator and the MCP server that exposes it as one tool.
 *
 * Grammar (recursive descent, never eval): + - * / ( ), unary minus, integers and decimals, whitespace.
 *   expr   := term (("+" | "-") term)*
 *   term   := unary (("*" | "/") unary)*
 *   unary  := "-" unary | atom
 *   atom   := number | "(" expr ")"
 *   number := digits ["." digits] | "." digits
 * Values are BigInt rationals, so sums and products of integers and decimals are exact at any size. The
 * result is a plain decimal string (`3404`, `-12`, `2.5`, `0.125`: no exponent, no trailing zeros): exact
 * when the decimal expansion terminates, rounded half away from zero to 10 decimal places when it does
 * not (1/3 -> `0.3333333333`). Bad syntax, division by zero, an input over 200 characters and a result
 * over 60 digits are `CalculatorError`s, which the MCP tool answers as tool errors (`error: <reason>`).
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";

export const MAX_EXPRESSION_LENGTH = 200;
export const MAX_RESULT_DIGITS = 60;
/** Decimal places kept for a quotient whose expansion does not terminate. */
export const ROUND_PLACES = 10;

export type CalculatorErrorKind = "empty" | "syntax" | "division_by_zero" | "too_long" | "too_large";

/** A bad expression: `kind` for code, `message` (the reason) for the model. */
export class CalculatorError extends Error {
  constructor(
    readonly kind: CalculatorErrorKind,
    message: string,
  ) {
    super(message);
    this.name = "CalculatorError";
  }
}

/** A reduced fraction n/d with d > 0. */
interface Rational {
  n: bigint;
  d: bigint;
}

const abs = (x: bigint): bigint => (x < 0n ? -x : x);

function gcd(a: bigint, b: bigint): bigint {
  a = abs(a);
  b = abs(b);
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
}

function rational(n: bigint, d: bigint): Rational {
  if (d < 0n) [n, d] = [-n, -d];
  const g = gcd(n, d);
  return g > 1n ? { n: n / g, d: d / g } : { n, d };
}

const add = (a: Rational, b: Rational): Rational => rational(a.n * b.d + b.n * a.d, a.d * b.d);
const sub = (a: Rational, b: Rational): Rational => rational(a.n * b.d - b.n * a.d, a.d * b.d);
const mul = (a: Rational, b: Rational): Rational => rational(a.n * b.n, a.d * b.d);
function div(a: Rational, b: Rational): Rational {
  if (b.n === 0n) throw new CalculatorError("division_by_zero", "division by zero");
  return rational(a.n * b.d, a.d * b.n);
}

/** The parser: one pass over the input, evaluating as it goes. */
class Parser {
  private pos = 0;
  constructor(private readonly src: string) {}

  parse(): Rational {
    const value = this.expr();
    this.skipSpace();
    if (this.pos < this.src.length) throw this.unexpected();
    return value;
  }

  private skipSpace(): void {
    while (this.pos < this.src.length && /\s/.test(this.src[this.pos]!)) this.pos++;
  }

  private peek(): string | undefined {
    this.skipSpace();
    return this.src[this.pos];
  }

  private unexpected(): CalculatorError {
    const at = this.src[this.pos];
    return at === undefined
      ? new CalculatorError("syntax", "unexpected end of expression")
      : new CalculatorError("syntax", `unexpected '${at}' at position ${this.pos + 1}`);
  }

  private expr(): Rational {
    let value = this.term();
    for (let op = this.peek(); op === "+" || op === "-"; op = this.peek()) {
      this.pos++;
      const right = this.term();
      value = op === "+" ? add(value, right) : sub(value, right);
    }
    return value;
  }

  private term(): Rational {
    let value = this.unary();
    for (let op = this.peek(); op === "*" || op === "/"; op = this.peek()) {
      this.pos++;
      const right = this.unary();
      value = op === "*" ? mul(value, right) : div(value, right);
    }
    return value;
  }

  private unary(): Rational {
    if (this.peek() === "-") {
      this.pos++;
      const v = this.unary();
      return { n: -v.n, d: v.d };
    }
    return this.atom();
  }

  private atom(): Rational {
    if (this.peek() === "(") {
      this.pos++;
      const value = this.expr();
      if (this.peek() !== ")") throw this.unexpected();
      this.pos++;
      return value;
    }
    const match = /^(\d+)(?:\.(\d+))?|^\.(\d+)/.exec(this.src.slice(this.pos));
    if (!match) throw this.unexpected();
    this.pos += match[0].length;
    const whole = match[1] ?? "0";
    const fraction = match[2] ?? match[3] ?? "";
    return rational(BigInt(whole + fraction), 10n ** BigInt(fraction.length));
  }
}

/** The decimal places of n/d's expansion when it terminates (d = 2^a 5^b: max(a, b)), else undefined. */
function terminatingPlaces(d: bigint): number | undefined {
  let twos = 0;
  let fives = 0;
  for (; d % 2n === 0n; d /= 2n) twos++;
  for (; d % 5n === 0n; d /= 5n) fives++;
  return d === 1n ? Math.max(twos, fives) : undefined;
}

/** The plain decimal string of `value` (see the module comment for the rounding rule). */
export function formatRational(value: Rational): string {
  const negative = value.n < 0n;
  const magnitude = abs(value.n);
  const exact = terminatingPlaces(value.d);
  const places = exact ?? ROUND_PLACES;
  const scale = 10n ** BigInt(places);
  // magnitude/d = n/10^places: exact when the expansion terminates, else rounded half away from zero.
  const n = exact !== undefined ? (magnitude * scale) / value.d : (2n * magnitude * scale + value.d) / (2n * value.d);
  let digits = n.toString();
  if (places > 0) {
    digits = digits.padStart(places + 1, "0");
    const cut = digits.length - places;
    const fraction = digits.slice(cut).replace(/0+$/, "");
    digits = fraction ? `${digits.slice(0, cut)}.${fraction}` : digits.slice(0, cut);
  }
  if (digits.replace(".", "").length > MAX_RESULT_DIGITS) throw new CalculatorError("too_large", `result over ${MAX_RESULT_DIGITS} digits`);
  return negative && digits !== "0" ? `-${digits}` : digits;
}

/** Evaluates `expression` exactly and returns the plain decimal string; throws a `CalculatorError`. */
export function evaluate(expression: string): string {
  if (expression.length > MAX_EXPRESSION_LENGTH)
    throw new CalculatorError("too_long", `expression over ${MAX_EXPRESSION_LENGTH} characters`);
  if (expression.trim() === "") throw new CalculatorError("empty", "empty expression");
  return formatRational(new Parser(expression).parse());
}

export const CALCULATOR_TOOL = "calculator";
export const CALCULATOR_DESCRIPTION = "Evaluate an arithmetic expression exactly.";

/**
 * An MCP server with the one `calculator` tool. A bad expression is a tool result with `isError: true`
 * and the text `error: <reason>`; anything else thrown is a bug and reaches the client as the SDK's
 * tool error too, never a crash of the server.
 */
export function createCalculatorServer(): McpServer {
  const server = new McpServer({ name: "calculator", version: "1.0.0" });
  server.registerTool(
    CALCULATOR_TOOL,
    { description: CALCULATOR_DESCRIPTION, inputSchema: { expression: z.string() } },
    async ({ expression }) => {
      try {
        return { content: [{ type: "text", text: evaluate(expression) }] };
      } catch (e) {
        if (!(e instanceof CalculatorError)) throw e;
        return { content: [{ type: "text", text: `error: ${e.message}` }], isError: true };
      }
    },
  );
  return server;
}
