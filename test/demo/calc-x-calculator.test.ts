/**
 * The Calc-X calculator (examples/calc-x/calculator.ts): exact on integers and decimals of any size
 * (checked against BigInt arithmetic on random operands), precedence and unary minus, the rounding of
 * non-terminating quotients, every kind of bad input as a typed error, and the MCP tool over the SDK's
 * in-memory transport (its schema, its results, its tool errors).
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  CalculatorError,
  type CalculatorErrorKind,
  createCalculatorServer,
  evaluate,
  MAX_EXPRESSION_LENGTH,
} from "../../examples/calc-x/calculator.ts";
import { Rng } from "../../src/model/init.ts";

/** A random integer with 1..maxDigits digits (BigInt, so past 2^53). */
function randomDigits(rng: Rng, maxDigits: number): string {
  const n = 1 + Math.floor(rng.uniform() * maxDigits);
  let s = String(1 + Math.floor(rng.uniform() * 9));
  for (let i = 1; i < n; i++) s += String(Math.floor(rng.uniform() * 10));
  return s;
}

/** The decimal string of units / 10^places, written by hand: sign, digits, point, trailing zeros cut. */
function decimalString(units: bigint, places: number): string {
  const negative = units < 0n;
  const digits = (negative ? -units : units).toString().padStart(places + 1, "0");
  const whole = digits.slice(0, digits.length - places);
  const fraction = digits.slice(digits.length - places).replace(/0+$/, "");
  const s = fraction === "" ? whole : `${whole}.${fraction}`;
  return negative && s !== "0" ? `-${s}` : s;
}

function errorKind(expression: string): CalculatorErrorKind | "no error" {
  try {
    evaluate(expression);
    return "no error";
  } catch (e) {
    expect(e).toBeInstanceOf(CalculatorError);
    return (e as CalculatorError).kind;
  }
}

describe("evaluate: exact arithmetic", () => {
  it("sums, differences and products of big integers equal BigInt's", () => {
    const rng = new Rng(7);
    for (let i = 0; i < 300; i++) {
      const [a, b, c] = [randomDigits(rng, 25), randomDigits(rng, 25), randomDigits(rng, 8)];
      const [A, B, C] = [BigInt(a), BigInt(b), BigInt(c)];
      expect(evaluate(`${a}*${b}`)).toBe((A * B).toString());
      expect(evaluate(`${a} - ${b} * ${c}`)).toBe((A - B * C).toString());
      expect(evaluate(`-${a} + ${b}`)).toBe((B - A).toString());
      expect(evaluate(`(${a} * ${b}) / ${b}`)).toBe(a);
    }
  });

  it("sums and products of decimals are exact (no binary floating point)", () => {
    const rng = new Rng(11);
    for (let i = 0; i < 300; i++) {
      const [p, q] = [1 + Math.floor(rng.uniform() * 6), 1 + Math.floor(rng.uniform() * 6)];
      const [X, Y] = [BigInt(randomDigits(rng, 12)), BigInt(randomDigits(rng, 12))];
      const [x, y] = [decimalString(X, p), decimalString(Y, q)];
      expect(evaluate(`${x} * ${y}`)).toBe(decimalString(X * Y, p + q));
      expect(evaluate(`${x} + ${y}`)).toBe(decimalString(X * 10n ** BigInt(q) + Y * 10n ** BigInt(p), p + q));
      expect(evaluate(`${x} - ${y}`)).toBe(decimalString(X * 10n ** BigInt(q) - Y * 10n ** BigInt(p), p + q));
    }
    expect(evaluate("0.1 + 0.2")).toBe("0.3");
    expect(evaluate("1.10 * 3")).toBe("3.3");
    expect(evaluate("2.50")).toBe("2.5");
    expect(evaluate(".5 * 4")).toBe("2");
    expect(evaluate("100.000")).toBe("100");
  });

  it("precedence, left associativity, parentheses, unary minus, whitespace", () => {
    const cases: [string, string][] = [
      ["2+3*4", "14"],
      ["(2+3)*4", "20"],
      ["10-4-3", "3"],
      ["64/4/2", "8"],
      ["2*-3", "-6"],
      ["-(2+3)*-2", "10"],
      ["--5", "5"],
      ["- 5", "-5"],
      ["7-10", "-3"],
      [" \t23 * 148\n", "3404"],
      ["3404 - 517", "2887"],
      ["((((1))))+(((2)))", "3"],
      ["1 - -1", "2"],
      ["0*-7", "0"],
    ];
    for (const [e, want] of cases) expect(evaluate(e), e).toBe(want);
  });

  it("a quotient is exact when it terminates, rounded half away from zero to 10 places when it does not", () => {
    const cases: [string, string][] = [
      ["5/2", "2.5"],
      ["1/8", "0.125"],
      ["1/1024", "0.0009765625"],
      ["3/64", "0.046875"], // 6 places, exact
      ["1/2048", "0.00048828125"], // 11 places: terminates, so exact
      ["1/3", "0.3333333333"],
      ["2/3", "0.6666666667"],
      ["-2/3", "-0.6666666667"],
      ["22/7", "3.1428571429"],
      ["1/30000000000000", "0"], // rounds to zero: no "-0"
      ["-1/30000000000000", "0"],
      ["10/4*2", "5"],
    ];
    for (const [e, want] of cases) expect(evaluate(e), e).toBe(want);
  });

  it("a result of exactly 60 digits is fine; one over 60 digits is too large", () => {
    const thirty = `1${"0".repeat(29)}`;
    expect(evaluate(`${thirty}*${thirty}*9`)).toBe(`9${"0".repeat(58)}`); // 59 digits
    expect(evaluate(`${"9".repeat(30)}*${"9".repeat(30)}`)).toHaveLength(60);
    expect(errorKind(`${thirty}*${thirty}*10*10`)).toBe("too_large"); // 61 digits
    expect(errorKind(`1/${2n ** 200n}`)).toBe("too_large"); // terminates after 200 places
  });
});

describe("evaluate: bad input is a typed CalculatorError, never a crash", () => {
  it("syntax errors name what was unexpected", () => {
    for (const e of ["2+", "2 3", "(1", "1)", "1e3", "1,000", "abc", "2**3", "1..2", ".", "2^3", "()", "+1", "3 * (4 - )"])
      expect(errorKind(e), e).toBe("syntax");
    expect(() => evaluate("1 + x")).toThrow("unexpected 'x' at position 5");
    expect(() => evaluate("(1 + 2")).toThrow("unexpected end of expression");
  });

  it("division by zero, even by a zero that is computed", () => {
    for (const e of ["1/0", "0/0", "5/(3-3)", "1/0.000"]) expect(errorKind(e), e).toBe("division_by_zero");
    expect(() => evaluate("1/0")).toThrow("division by zero");
  });

  it("an input over the length limit is refused before parsing; one at the limit is evaluated", () => {
    const atLimit = "1+".repeat(MAX_EXPRESSION_LENGTH / 2 - 1) + "1";
    expect(atLimit).toHaveLength(MAX_EXPRESSION_LENGTH - 1);
    expect(evaluate(`${atLimit} `)).toBe(String(MAX_EXPRESSION_LENGTH / 2));
    expect(errorKind(`${atLimit}+1`)).toBe("too_long");
    expect(errorKind("(".repeat(5000))).toBe("too_long");
  });

  it("an empty or blank expression", () => {
    for (const e of ["", "   ", "\n\t"]) expect(errorKind(e)).toBe("empty");
  });
});

describe("the calculator as an MCP tool (in-memory transport)", () => {
  let client: Client;
  beforeAll(async () => {
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await createCalculatorServer().connect(serverSide);
    client = new Client({ name: "test", version: "1.0.0" });
    await client.connect(clientSide);
  });
  afterAll(() => client.close());

  const call = (args: Record<string, unknown>) => client.callTool({ name: "calculator", arguments: args });

  it("lists one tool, `calculator`, with the contract's description and input schema", async () => {
    const { tools } = await client.listTools();
    expect(tools).toHaveLength(1);
    expect(tools[0].name).toBe("calculator");
    expect(tools[0].description).toBe("Evaluate an arithmetic expression exactly.");
    const { $schema: _, ...schema } = tools[0].inputSchema as Record<string, unknown>;
    expect(schema).toEqual({ type: "object", properties: { expression: { type: "string" } }, required: ["expression"] });
  });

  it("answers the exact value as text", async () => {
    expect(await call({ expression: "23*148" })).toEqual({ content: [{ type: "text", text: "3404" }] });
    expect(await call({ expression: "123456789123456789 * 987654321987654321" })).toEqual({
      content: [{ type: "text", text: (123456789123456789n * 987654321987654321n).toString() }],
    });
  });

  it("answers a bad expression with a tool error `error: <reason>`, and keeps serving", async () => {
    const bad: [string, string][] = [
      ["1/0", "error: division by zero"],
      ["2+", "error: unexpected end of expression"],
      ["", "error: empty expression"],
      ["1+".repeat(150), `error: expression over ${MAX_EXPRESSION_LENGTH} characters`],
      [`${"9".repeat(31)}*${"9".repeat(31)}`, "error: result over 60 digits"],
    ];
    for (const [expression, text] of bad) expect(await call({ expression })).toEqual({ content: [{ type: "text", text }], isError: true });
    expect(await call({ expression: "1+1" })).toEqual({ content: [{ type: "text", text: "2" }] });
  });

  it("arguments that do not match the schema are a tool error too (the SDK's validation)", async () => {
    for (const args of [{}, { expression: 5 }]) {
      const r = await call(args);
      expect(r.isError).toBe(true);
      expect((r.content as { text: string }[])[0].text).toMatch(/expression/);
    }
  });
});
