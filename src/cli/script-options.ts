/**
 * Command lines of scripts whose settings are one options object with defaults (the examples' demos and
 * SFT scripts): each option named in the spec becomes a flag (`decayShare` is `--decay-share`), typed by
 * its default, with the default in its help; the agl flag parser reads them (src/cli/flags.ts), so a
 * typo or a bad value is one line naming the flag, and `--help` lists them all.
 */
import { type CommandSpec, FlagError, type FlagSpec, formatHelp, parseFlags } from "./flags.ts";

/** How one option is given on the command line. */
export interface ScriptOption {
  help: string;
  /** The flag's name when it is not the option's in kebab case (`preset` for `config`). */
  flag?: string;
  /** The value's placeholder in the help [N for numbers, VALUE for strings]. */
  value?: string;
  /** The flag's type when the default does not tell (an option whose default is undefined or null). */
  type?: FlagSpec["type"];
  choices?: readonly string[];
  integer?: boolean;
  min?: number;
  max?: number;
  exclusiveMin?: boolean;
  /** Turns the flag's value into the option's (e.g. "none" into null) [as it is]. */
  parse?: (raw: string | number | boolean) => unknown;
}

export type ScriptOptions<T> = { readonly [K in keyof T]?: ScriptOption };

export interface ScriptCommand<T> {
  usage: string;
  about?: string;
  defaults: T;
  options: ScriptOptions<T>;
}

const kebab = (key: string): string => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

function flagOf(key: string, o: ScriptOption, fallback: unknown): FlagSpec {
  const type = o.type ?? (typeof fallback === "number" ? "number" : typeof fallback === "boolean" ? "boolean" : "string");
  const shown = fallback === undefined || typeof fallback === "object" ? "" : ` [${String(fallback)}]`;
  return {
    name: o.flag ?? kebab(key),
    type,
    help: `${o.help}${shown}`,
    ...(type === "boolean" ? {} : { value: o.value ?? (type === "number" ? "N" : "VALUE") }),
    ...(o.choices ? { choices: o.choices } : {}),
    ...(o.integer ? { integer: true } : {}),
    ...(o.min !== undefined ? { min: o.min } : {}),
    ...(o.max !== undefined ? { max: o.max } : {}),
    ...(o.exclusiveMin ? { exclusiveMin: true } : {}),
  };
}

/** The script's flag table, for {@link parseScriptArgs} and `--help`. */
export function scriptCommandSpec<T>(c: ScriptCommand<T>): CommandSpec {
  const flags = Object.entries(c.options as Record<string, ScriptOption>).map(([key, o]) =>
    flagOf(key, o, (c.defaults as Record<string, unknown>)[key]),
  );
  return { usage: c.usage, ...(c.about ? { about: c.about } : {}), sections: [{ title: "Options:", flags }] };
}

/** The options the command line sets (the rest stay the defaults'); `help` when -h/--help was given. */
export function parseScriptArgs<T>(c: ScriptCommand<T>, argv: readonly string[]): { help: boolean; options: Partial<T> } {
  const { help, values } = parseFlags(scriptCommandSpec(c), argv);
  const given = values as Record<string, string | number | boolean | undefined>;
  const options: Record<string, unknown> = {};
  for (const [key, o] of Object.entries(c.options as Record<string, ScriptOption>)) {
    const raw = given[o.flag ?? kebab(key)];
    if (raw !== undefined) options[key] = o.parse ? o.parse(raw) : raw;
  }
  return { help, options: options as Partial<T> };
}

/**
 * Runs a script's main with its parsed options and returns the process's exit code: `--help` prints the
 * flags (0), a bad command line prints one line naming the flag (2), else main's code.
 */
export async function runScript<T>(
  name: string,
  c: ScriptCommand<T>,
  argv: readonly string[],
  main: (options: Partial<T>) => Promise<number>,
): Promise<number> {
  let parsed: { help: boolean; options: Partial<T> };
  try {
    parsed = parseScriptArgs(c, argv);
  } catch (e) {
    if (!(e instanceof FlagError)) throw e;
    console.error(`${name}: ${e.message} (--help lists the options)`);
    return 2;
  }
  if (parsed.help) {
    console.log(formatHelp(scriptCommandSpec(c)));
    return 0;
  }
  return main(parsed.options);
}
