/**
 * A strict reader of the Prometheus text exposition format 0.0.4, for tests (no parser package is
 * installed). It throws, naming the line, on anything Prometheus would refuse or a reader could
 * misread: a malformed line, a sample before its family's TYPE, a family given twice or split by
 * another, a series given twice, a sample name that does not belong to its family, a histogram whose
 * buckets are not cumulative or whose +Inf bucket is not its count.
 */
export type FamilyType = "counter" | "gauge" | "histogram" | "summary" | "untyped";

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Family {
  name: string;
  type: FamilyType;
  help: string | null;
  samples: Sample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*/;
const TYPES = new Set<FamilyType>(["counter", "gauge", "histogram", "summary", "untyped"]);

function parseValue(text: string, where: string): number {
  if (text === "+Inf" || text === "Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  if (text === "NaN") return Number.NaN;
  if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text)) throw new Error(`${where}: bad value ${JSON.stringify(text)}`);
  return Number(text);
}

/** `{a="x",b="y"}` at the start of `s`: the labels and the rest of the line. */
function parseLabels(s: string, where: string): [Record<string, string>, string] {
  const labels: Record<string, string> = {};
  let i = 1;
  for (;;) {
    if (s[i] === "}") return [labels, s.slice(i + 1)];
    const name = LABEL.exec(s.slice(i))?.[0];
    if (!name) throw new Error(`${where}: bad label name at ${JSON.stringify(s.slice(i))}`);
    i += name.length;
    if (s[i] !== "=" || s[i + 1] !== '"') throw new Error(`${where}: expected ="..." after label ${name}`);
    i += 2;
    let value = "";
    for (;;) {
      const c = s[i];
      if (c === undefined) throw new Error(`${where}: unterminated label value`);
      if (c === '"') break;
      if (c === "\\") {
        const e = s[i + 1];
        if (e === "\\") value += "\\";
        else if (e === '"') value += '"';
        else if (e === "n") value += "\n";
        else throw new Error(`${where}: bad escape \\${e} in a label value`);
        i += 2;
      } else {
        value += c;
        i++;
      }
    }
    i++;
    if (Object.hasOwn(labels, name)) throw new Error(`${where}: label ${name} given twice`);
    labels[name] = value;
    if (s[i] === ",") i++;
    else if (s[i] !== "}") throw new Error(`${where}: expected , or } after label ${name}`);
  }
}

/** The family a sample name belongs to, given the families declared so far. */
function familyOf(name: string, families: Map<string, Family>): Family | undefined {
  const own = families.get(name);
  if (own) return own;
  for (const suffix of ["_bucket", "_sum", "_count"]) {
    if (!name.endsWith(suffix)) continue;
    const f = families.get(name.slice(0, -suffix.length));
    if (f && (f.type === "histogram" || (f.type === "summary" && suffix !== "_bucket"))) return f;
  }
  return undefined;
}

export function parsePrometheusText(text: string): Map<string, Family> {
  if (text !== "" && !text.endsWith("\n")) throw new Error("the exposition must end with a newline");
  const families = new Map<string, Family>();
  const closed = new Set<string>();
  let current: Family | null = null;
  const seen = new Set<string>();
  const typed = new Set<string>();
  text.split("\n").forEach((line, n) => {
    const where = `line ${n + 1}`;
    if (line.trim() === "") return;
    if (line.startsWith("#")) {
      const m = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
      if (!m) return; // a plain comment
      const [, kind, name, rest] = m as unknown as [string, "HELP" | "TYPE", string, string];
      if (!NAME.test(name) || NAME.exec(name)![0] !== name) throw new Error(`${where}: bad metric name ${name}`);
      let f = families.get(name);
      if (!f) {
        if (closed.has(name)) throw new Error(`${where}: family ${name} given again after another`);
        f = { name, type: "untyped", help: null, samples: [] };
        families.set(name, f);
      } else if (f !== current) throw new Error(`${where}: family ${name} given again after another`);
      if (current && current !== f) closed.add(current.name);
      current = f;
      if (kind === "HELP") {
        if (f.help !== null) throw new Error(`${where}: second HELP for ${name}`);
        f.help = rest.replace(/\\n/g, "\n").replace(/\\\\/g, "\\");
      } else {
        if (!TYPES.has(rest as FamilyType)) throw new Error(`${where}: unknown type ${rest}`);
        if (f.samples.length > 0 || typed.has(name)) throw new Error(`${where}: TYPE of ${name} after its samples or twice`);
        f.type = rest as FamilyType;
        typed.add(name);
      }
      return;
    }
    const name = NAME.exec(line)?.[0];
    if (!name) throw new Error(`${where}: bad sample line ${JSON.stringify(line)}`);
    let rest = line.slice(name.length);
    let labels: Record<string, string> = {};
    if (rest.startsWith("{")) [labels, rest] = parseLabels(rest, where);
    const parts = rest.split(" ");
    if (parts[0] !== "" || parts.length < 2 || parts.length > 3)
      throw new Error(`${where}: expected " value [timestamp]" after the name and labels`);
    const value = parseValue(parts[1]!, where);
    if (parts[2] !== undefined && !/^-?\d+$/.test(parts[2])) throw new Error(`${where}: bad timestamp ${parts[2]}`);
    const f = familyOf(name, families);
    if (!f) throw new Error(`${where}: sample ${name} before any TYPE or HELP of its family`);
    if (f !== current) throw new Error(`${where}: sample ${name} outside its family's block`);
    if (f.type === "counter" && (value < 0 || Number.isNaN(value))) throw new Error(`${where}: counter ${name} is ${value}`);
    const key = `${name}${JSON.stringify(Object.entries(labels).sort())}`;
    if (seen.has(key)) throw new Error(`${where}: series ${key} given twice`);
    seen.add(key);
    f.samples.push({ name, labels, value });
  });
  for (const f of families.values()) if (f.type === "histogram") checkHistogram(f);
  return families;
}

/** Per series: `le` bounds increasing, counts cumulative, a `+Inf` bucket equal to `_count`, and a `_sum`. */
function checkHistogram(f: Family): void {
  const series = new Map<string, { buckets: [number, number][]; count?: number; sum?: number }>();
  for (const s of f.samples) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    const entry = series.get(key) ?? { buckets: [] };
    series.set(key, entry);
    if (s.name === `${f.name}_bucket`) {
      if (le === undefined) throw new Error(`${f.name}: a bucket without le`);
      entry.buckets.push([parseValue(le, `${f.name} le`), s.value]);
    } else if (s.name === `${f.name}_count`) entry.count = s.value;
    else if (s.name === `${f.name}_sum`) entry.sum = s.value;
    else throw new Error(`${f.name}: sample ${s.name} in a histogram`);
  }
  for (const [key, e] of series) {
    for (let i = 1; i < e.buckets.length; i++) {
      if (!(e.buckets[i]![0] > e.buckets[i - 1]![0])) throw new Error(`${f.name}${key}: le bounds not increasing`);
      if (e.buckets[i]![1] < e.buckets[i - 1]![1]) throw new Error(`${f.name}${key}: bucket counts not cumulative`);
    }
    const inf = e.buckets.at(-1);
    if (!inf || inf[0] !== Infinity) throw new Error(`${f.name}${key}: no +Inf bucket`);
    if (e.count === undefined || e.sum === undefined) throw new Error(`${f.name}${key}: no _count or _sum`);
    if (inf[1] !== e.count) throw new Error(`${f.name}${key}: +Inf bucket ${inf[1]} is not _count ${e.count}`);
  }
}

/** The value of the one sample named `name` with exactly `labels`; undefined when there is none. */
export function sampleValue(families: Map<string, Family>, name: string, labels: Record<string, string> = {}): number | undefined {
  const want = JSON.stringify(Object.entries(labels).sort());
  const f = familyOf(name, families);
  return f?.samples.find((s) => s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === want)?.value;
}
