/**
 * The flag parser of the `agl` subcommands: each command declares its flags in one table, and the same
 * table parses the command line and writes `--help`. Plain code, so it runs alike on Node, Deno and Bun.
 *
 * `--flag value` and `--flag=value` both work; the value after a flag is taken as it is, even when it
 * starts with `-` (`--port -1` is a bad port, not an unknown flag). A flag given twice keeps the last
 * value unless it is repeatable. `-h` and `--help` are every command's.
 */
import { parseAllowedHost } from "../server/browser-guard.ts";
import { UsageError } from "../server/config.ts";

export interface FlagSpec {
  /** The long name without dashes: `port` is `--port`. */
  readonly name: string;
  readonly type: "string" | "number" | "boolean";
  /** Every occurrence is kept, in order (a list), instead of the last one. */
  readonly repeatable?: boolean;
  /** The value's placeholder in the help (`PORT`); the help omits it for booleans. */
  readonly value?: string;
  /** The help text; lines after the first continue under it. */
  readonly help: string;
  /** An environment variable that also sets it, shown in the help. */
  readonly env?: string;
  /** Refused when absent (unless `--help` is given). */
  readonly required?: boolean;
  /** Numbers: whole numbers only. */
  readonly integer?: boolean;
  /** Numbers: the bounds; `exclusiveMin` makes `min` itself refused. */
  readonly min?: number;
  readonly max?: number;
  readonly exclusiveMin?: boolean;
  /** Numbers: the unit, for the error (`a number of seconds`). */
  readonly unit?: string;
  /** Strings: the only values allowed. */
  readonly choices?: readonly string[];
  /** Parsed but left out of the help and of the list of valid flags (test hooks). */
  readonly hidden?: boolean;
}

/** A command's flags under their help headings (`Options:`, or `Required:` and `Options ...:`). */
export interface FlagSection {
  readonly title: string;
  readonly flags: readonly FlagSpec[];
}

export interface CommandSpec {
  /** The first line of the help, after `Usage: `. */
  readonly usage: string;
  /** Paragraphs between the usage line and the flags. */
  readonly about?: string;
  readonly sections: readonly FlagSection[];
  /** Text after the flags. */
  readonly footer?: string;
}

/** A bad command line that names the flag at fault. */
export class FlagError extends UsageError {
  constructor(
    readonly flag: string,
    message: string,
  ) {
    super(message);
    this.name = new.target.name;
  }
}

/** A flag (or a bare word) the command does not have. */
export class UnknownFlagError extends FlagError {
  constructor(
    flag: string,
    readonly valid: readonly string[],
  ) {
    super(flag, `unknown option ${JSON.stringify(flag)}; the options are ${valid.join(", ")}`);
  }
}

/** A flag that takes a value given as the last argument. */
export class MissingFlagValueError extends FlagError {
  constructor(flag: string) {
    super(flag, `${flag} needs a value`);
  }
}

/** A value its flag refuses (not a number, out of range, not one of the choices, or given to a boolean). */
export class InvalidFlagValueError extends FlagError {
  constructor(
    flag: string,
    readonly value: string,
    expected: string,
  ) {
    super(flag, `${flag} ${expected} (got ${JSON.stringify(value)})`);
  }
}

/** A required flag left out. */
export class MissingFlagError extends FlagError {
  constructor(flag: string, placeholder: string | undefined) {
    super(flag, `${flag}${placeholder ? ` ${placeholder}` : ""} is required`);
  }
}

type One<F extends FlagSpec> = F["type"] extends "number"
  ? number
  : F["type"] extends "boolean"
    ? boolean
    : F extends { choices: readonly (infer C)[] }
      ? C
      : string;

/** The parsed values by flag name; a flag not given is absent. */
export type FlagValues<Fs extends readonly FlagSpec[]> = {
  [F in Fs[number] as F["name"]]?: F extends { repeatable: true } ? One<F>[] : One<F>;
};

/** A TCP port: 0 lets the system pick a free one. */
export const PORT_BOUNDS = { integer: true, min: 0, max: 65535 } as const;

/** The `--port` flag the server commands share; its default differs, so the help is each command's. */
export const portFlag = (help: string) => ({ name: "port", type: "number", ...PORT_BOUNDS, value: "PORT", help }) as const;

/** `--allowed-host NAME` of the server commands (src/server/browser-guard.ts). */
export const allowedHostFlag = {
  name: "allowed-host",
  type: "string",
  repeatable: true,
  value: "NAME",
  help:
    "also answer requests whose Host is NAME (repeatable; .NAME adds its subdomains, * any name); without a token\n" +
    "a server on loopback answers only localhost, IP addresses and its bind address, against DNS rebinding",
} as const;

/** The `--allowed-host` values, normalised; a bad one is a FlagError naming it. */
export function parseAllowedHosts(values: readonly string[] | undefined): string[] {
  return (values ?? []).map((v) => {
    try {
      return parseAllowedHost(v);
    } catch {
      throw new InvalidFlagValueError(
        "--allowed-host",
        v,
        "must be a host name without a scheme, port or path (example.com, .example.com or *)",
      );
    }
  });
}

const HELP_FLAG: FlagSpec = { name: "help", type: "boolean", help: "this text" };

const flagsOf = (command: CommandSpec): FlagSpec[] => command.sections.flatMap((s) => s.flags);

/** "a, b or c" */
const orList = (xs: readonly string[]): string => (xs.length < 2 ? xs.join("") : `${xs.slice(0, -1).join(", ")} or ${xs[xs.length - 1]}`);

/** What a number flag accepts, as the end of "--x must be ...". */
function numberRule(spec: Pick<FlagSpec, "integer" | "min" | "max" | "exclusiveMin" | "unit">): string {
  const what = `${spec.integer ? "an integer" : "a number"}${spec.unit ? ` of ${spec.unit}` : ""}`;
  const max = spec.max !== undefined && spec.max < Number.MAX_SAFE_INTEGER ? spec.max : undefined;
  const { min } = spec;
  if (min !== undefined && max !== undefined)
    return `${what} ${spec.exclusiveMin ? `above ${min} and at most ${max}` : `from ${min} to ${max}`}`;
  if (min !== undefined) return `${what} ${spec.exclusiveMin ? "above" : "of at least"} ${min}`;
  if (max !== undefined) return `${what} of at most ${max}`;
  return what;
}

// Decimal only: Number() would also take "0x10", "0b1" and "Infinity".
const DECIMAL = /^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?$/i;

/**
 * A number checked as a number flag is: decimal, whole if `integer`, within the bounds. Also for
 * environment variables (`name` is then the variable's), so both read the same.
 */
export function parseNumber(
  name: string,
  raw: string,
  spec: Pick<FlagSpec, "integer" | "min" | "max" | "exclusiveMin" | "unit"> = {},
): number {
  const n = Number(raw.trim());
  const ok =
    DECIMAL.test(raw.trim()) &&
    Number.isFinite(n) &&
    (!spec.integer || Number.isSafeInteger(n)) &&
    (spec.min === undefined || (spec.exclusiveMin ? n > spec.min : n >= spec.min)) &&
    (spec.max === undefined || n <= spec.max);
  if (!ok) throw new InvalidFlagValueError(name, raw, `must be ${numberRule(spec)}`);
  return n;
}

function convert(flag: string, spec: FlagSpec, raw: string): string | number {
  if (spec.type === "number") return parseNumber(flag, raw, spec);
  if (spec.choices && !spec.choices.includes(raw)) throw new InvalidFlagValueError(flag, raw, `must be ${orList(spec.choices)}`);
  return raw;
}

/** The command line's flags, checked against the command's table; `help` is true when `-h` or `--help` was given. */
export function parseFlags<const C extends CommandSpec>(
  command: C,
  argv: readonly string[],
): { help: boolean; values: FlagValues<C["sections"][number]["flags"]> } {
  const specs = new Map(flagsOf(command).map((s) => [`--${s.name}`, s]));
  const values: Record<string, unknown> = {};
  let help = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const eq = arg.startsWith("--") ? arg.indexOf("=") : -1;
    const flag = eq > 0 ? arg.slice(0, eq) : arg;
    const inline = eq > 0 ? arg.slice(eq + 1) : undefined;
    if (flag === "-h" || flag === "--help") {
      if (inline !== undefined) throw new InvalidFlagValueError(flag, inline, "takes no value");
      help = true;
      continue;
    }
    const spec = specs.get(flag);
    if (spec === undefined) throw new UnknownFlagError(flag, validFlags(command));
    let value: string | number | boolean;
    if (spec.type === "boolean") {
      if (inline !== undefined) throw new InvalidFlagValueError(flag, inline, "takes no value");
      value = true;
    } else {
      const raw = inline ?? argv[++i];
      if (raw === undefined) throw new MissingFlagValueError(flag);
      value = convert(flag, spec, raw);
    }
    if (spec.repeatable) ((values[spec.name] ??= []) as unknown[]).push(value);
    else values[spec.name] = value;
  }
  if (!help)
    for (const spec of specs.values())
      if (spec.required && values[spec.name] === undefined) throw new MissingFlagError(`--${spec.name}`, spec.value);
  return { help, values: values as FlagValues<C["sections"][number]["flags"]> };
}

/** The flags a user may give, as the help lists them. */
export function validFlags(command: CommandSpec): string[] {
  return [...flagsOf(command).filter((s) => !s.hidden), HELP_FLAG].map((s) => `--${s.name}`);
}

/** Labels wider than this put their help on the next line. */
const LABEL_WIDTH = 22;

/** The command's `--help`: usage line, about, each section's flags with their help, footer. */
export function formatHelp(command: CommandSpec): string {
  const label = (s: FlagSpec): string =>
    s === HELP_FLAG ? "-h, --help" : `--${s.name}${s.type === "boolean" ? "" : ` ${s.value ?? "VALUE"}`}`;
  const sections = command.sections.map((s, i) => ({
    title: s.title,
    flags: [...s.flags.filter((f) => !f.hidden), ...(i === command.sections.length - 1 ? [HELP_FLAG] : [])],
  }));
  const width = Math.min(LABEL_WIDTH, Math.max(...sections.flatMap((s) => s.flags.map((f) => label(f).length)))) + 2;
  const pad = " ".repeat(2 + width);
  const row = (f: FlagSpec): string => {
    const name = label(f);
    const lines = `${f.help}${f.env ? `  [${f.env}]` : ""}`.split("\n");
    const first = name.length <= width - 2 ? `  ${name.padEnd(width)}${lines[0]}` : `  ${name}\n${pad}${lines[0]}`;
    return [first, ...lines.slice(1).map((l) => pad + l)].join("\n");
  };
  const parts = [`Usage: ${command.usage}`];
  if (command.about) parts.push(command.about);
  for (const s of sections) parts.push(`${s.title}\n${s.flags.map(row).join("\n")}`);
  if (command.footer) parts.push(command.footer);
  return `${parts.join("\n\n")}\n`;
}
