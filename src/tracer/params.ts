/**
 * Best-effort parameter names of a JS function, from its source text: the stand-in for Python's
 * `inspect.signature`, which upstream uses to inject resources into function agents by parameter name and
 * to name an operation's recorded inputs. Minified or destructured parameters are not
 * nameable: those come back as null, and callers fall back to positional recording or explicit
 * declarations.
 */
export interface ParamInfo {
  /** Plain parameter names in order; null for a destructured one. */
  names: (string | null)[];
  /** The name of a `...rest` parameter, if any (not included in `names`). */
  rest: string | null;
}

/** Splits on top-level commas (ignoring those inside brackets, strings and template literals). */
function splitTopLevel(s: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let quote: string | null = null;
  let cur = "";
  for (let i = 0; i < s.length; i++) {
    const c = s[i]!;
    if (quote) {
      cur += c;
      if (c === "\\") cur += s[++i] ?? "";
      else if (c === quote) quote = null;
      continue;
    }
    if (c === '"' || c === "'" || c === "`") quote = c;
    else if (c === "(" || c === "[" || c === "{") depth++;
    else if (c === ")" || c === "]" || c === "}") depth--;
    else if (c === "," && depth === 0) {
      parts.push(cur);
      cur = "";
      continue;
    }
    cur += c;
  }
  if (cur.trim() !== "") parts.push(cur);
  return parts;
}

/** The text between the parameter list's parentheses, or a bare arrow parameter. */
function paramSource(src: string): string | null {
  const text = src
    .replace(/\/\*[\s\S]*?\*\//g, "")
    .replace(/\/\/[^\n]*/g, "")
    .trim();
  const bareArrow = /^(?:async\s+)?([A-Za-z_$][\w$]*)\s*=>/.exec(text);
  if (bareArrow) return bareArrow[1]!;
  const open = text.indexOf("(");
  if (open < 0) return null;
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    const c = text[i];
    if (c === "(") depth++;
    else if (c === ")" && --depth === 0) return text.slice(open + 1, i);
  }
  return null;
}

export function parameterInfo(fn: (...args: never[]) => unknown): ParamInfo | null {
  let src: string;
  try {
    src = Function.prototype.toString.call(fn);
  } catch {
    return null;
  }
  if (src.includes("[native code]")) return null;
  const inner = paramSource(src);
  if (inner === null) return null;
  const names: (string | null)[] = [];
  let rest: string | null = null;
  for (const raw of splitTopLevel(inner)) {
    const p = raw.trim();
    if (p.startsWith("...")) {
      const m = /^\.\.\.\s*([A-Za-z_$][\w$]*)/.exec(p);
      rest = m ? m[1]! : null;
      continue;
    }
    const m = /^([A-Za-z_$][\w$]*)\s*(?:[:=?]|$)/.exec(p);
    names.push(m ? m[1]! : null);
  }
  return { names, rest };
}

/** Plain parameter names (destructured ones dropped). */
export function parameterNames(fn: (...args: never[]) => unknown): string[] {
  return (parameterInfo(fn)?.names ?? []).filter((n): n is string => n !== null);
}
