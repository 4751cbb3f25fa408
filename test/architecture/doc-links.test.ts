/**
 * Every citation of the docs resolves: `docs/<file>.md#<anchor>` in code comments and tests, and links between
 * the markdown files (`[text](x.md#anchor)`, `(#anchor)`), name a file that exists and a heading in it,
 * with the anchor GitHub derives from the heading. `docs/departures.md#<row>` names that row of its table, as
 * that file says code cites it.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/** GitHub's anchor for a heading's text (github-slugger): lower case, punctuation dropped, spaces as hyphens. */
export function githubSlug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1") // a link or image shows its text
    .replace(/<[^>]+>/g, ""); // tags show nothing
  return text
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "")
    .replace(/ /g, "-");
}

/** The anchors of a markdown file: its headings' slugs (repeats numbered -1, -2, ... as GitHub does) and explicit `<a id>`s. */
export function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  const body = markdown.replace(/^(```|~~~)[\s\S]*?^\1/gm, ""); // a `#` inside a code block is not a heading
  for (const m of body.matchAll(/^#{1,6}[ \t]+(.+?)[ \t#]*$/gm)) {
    const slug = githubSlug(m[1]!);
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    anchors.add(n === 0 ? slug : `${slug}-${n}`);
  }
  for (const m of body.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(m[1]!);
  return anchors;
}

/** Row numbers of docs/departures.md's table (`| N | topic | ...`), which code cites as `docs/departures.md#<row>`. */
const departureRows = (markdown: string): Set<string> => new Set([...markdown.matchAll(/^\|\s*(\d+)\s*\|/gm)].map((m) => m[1]!));

function filesUnder(dir: string, keep: (path: string) => boolean): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (name === "node_modules" || name === "fixtures" || name.startsWith(".")) return [];
    if (statSync(path).isDirectory()) return filesUnder(path, keep);
    return keep(path) ? [path] : [];
  });
}

interface Citation {
  /** Where it is written, `path:line`. */
  at: string;
  /** The markdown file it names (absolute) and the anchor, if any. */
  target: string;
  anchor: string | undefined;
}

const lineOf = (text: string, index: number): number => text.slice(0, index).split("\n").length;

/** `docs/<file>.md#<anchor>` written in code (comments, test titles, messages). */
function codeCitations(file: string): Citation[] {
  const text = readFileSync(file, "utf8");
  return [...text.matchAll(/\bdocs\/([\w-]+\.md)(?:#([\w-]+))?/g)].map((m) => ({
    at: `${relative(root, file)}:${lineOf(text, m.index)}`,
    target: join(root, "docs", m[1]!),
    anchor: m[2],
  }));
}

/** Links of a markdown file to itself or to another markdown file of the repository. */
function markdownCitations(file: string): Citation[] {
  const text = readFileSync(file, "utf8").replace(/^(```|~~~)[\s\S]*?^\1/gm, (block) => block.replace(/[^\n]/g, " "));
  return [...text.matchAll(/\]\(([^)\s#]*\.md|)(?:#([^)\s]+))?\)/g)]
    .filter((m) => m[1] !== "" || m[2] !== undefined)
    .filter((m) => !/^[a-z]+:/.test(m[1]!))
    .map((m) => ({
      at: `${relative(root, file)}:${lineOf(text, m.index)}`,
      target: m[1] === "" ? file : resolve(dirname(file), m[1]!),
      anchor: m[2],
    }));
}

const code = ["src", "test", "bench", "examples", "scripts", "runtimes"].flatMap((dir) =>
  filesUnder(join(root, dir), (p) => /\.(ts|mts|mjs|js)$/.test(p)),
);
const markdown = [
  join(root, "README.md"),
  ...["docs", "src", "examples", "bench"].flatMap((dir) => filesUnder(join(root, dir), (p) => p.endsWith(".md"))),
];

const anchorCache = new Map<string, Set<string>>();
function anchorsIn(target: string): Set<string> {
  let anchors = anchorCache.get(target);
  if (!anchors) {
    const text = readFileSync(target, "utf8");
    anchors = anchorsOf(text);
    if (target === join(root, "docs/departures.md")) for (const row of departureRows(text)) anchors.add(row);
    anchorCache.set(target, anchors);
  }
  return anchors;
}

/** The citations whose file or anchor does not exist, as `where -> target#anchor`. */
function broken(citations: Citation[]): string[] {
  return citations
    .filter((c) => !existsSync(c.target) || (c.anchor !== undefined && !anchorsIn(c.target).has(c.anchor)))
    .map((c) => `${c.at} -> ${relative(root, c.target)}${c.anchor === undefined ? "" : `#${c.anchor}`}`);
}

describe("GitHub's heading anchors", () => {
  it("drop punctuation and code marks, keep letters, digits, hyphens and underscores, and number repeats", () => {
    expect(githubSlug("CPU engine (`bench/cpu-engine.ts`)")).toBe("cpu-engine-benchcpu-enginets");
    expect(githubSlug("Why not `@opentelemetry/instrumentation-openai`")).toBe("why-not-opentelemetryinstrumentation-openai");
    expect(githubSlug("The loop: `iter`")).toBe("the-loop-iter");
    expect(githubSlug("1. Start the store")).toBe("1-start-the-store");
    expect(githubSlug("See [the store](store.md) now")).toBe("see-the-store-now");
    expect([...anchorsOf("# A\n\n## Options\n\n```sh\n# not a heading\n```\n\n### Options\n")]).toEqual(["a", "options", "options-1"]);
  });
});

describe("citations of the docs", () => {
  it("every docs/<file>.md#<anchor> in the code names an existing file and heading", () => {
    const citations = code.flatMap(codeCitations);
    expect(citations.length).toBeGreaterThan(100);
    expect(broken(citations)).toEqual([]);
  });

  it("every link between the markdown files names an existing file and heading", () => {
    const citations = markdown.flatMap(markdownCitations);
    expect(citations.length).toBeGreaterThan(50);
    expect(broken(citations)).toEqual([]);
  });
});
