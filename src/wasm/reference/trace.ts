/**
 * Plain-TS reference of the trace-tree kernel (tree, repair, LLM-call search, reward matching:
 * docs/adapters.md#tracetripletadapter) over the same encoded columns as
 * the Wasm kernel, written as upstream's recursive code reads: node objects, recursion, sorted copies.
 */
import { TRACE_FLAG as F, TRACE_OPT as O } from "../exports.ts";
import type { EncodedTrace, ExtractedCalls } from "../types.ts";

interface Node {
  i: number;
  children: Node[];
}

function traverse(node: Node, out: Node[] = []): Node[] {
  out.push(node);
  for (const c of node.children) traverse(c, out);
  return out;
}

/** Repair: re-parent the root's direct children under their tightest strictly enclosing span. */
function repairHierarchy(node: Node, t: EncodedTrace): void {
  if (node.children.length === 1) {
    repairHierarchy(node.children[0], t);
    return;
  }
  for (const r of [...node.children]) {
    if (node.children.length === 1) break;
    const own = new Set(traverse(r)); // never move a span under its own descendant
    let best: Node | null = null,
      bestD = Infinity;
    for (const c of traverse(node)) {
      if (c === node || own.has(c)) continue;
      if (t.start[c.i] <= t.start[r.i] && t.end[c.i] >= t.end[r.i]) {
        const d = t.end[c.i] - t.end[r.i] + (t.start[r.i] - t.start[c.i]);
        if (d > 0 && d < bestD) {
          best = c;
          bestD = d;
        }
      }
    }
    if (best) {
      node.children.splice(node.children.indexOf(r), 1);
      best.children.push(r);
    }
  }
}

interface State {
  subtree: number | null;
  reward: boolean | null;
  llm: boolean | null;
} // subtree -1 = "*"

function findLlmCalls(node: Node, t: EncodedTrace, s: State, seen: Set<number>, out: { node: Node; label: number }[]): void {
  const f = t.flags[node.i];
  let llm = s.llm;
  if (s.subtree !== null && s.reward !== true && f & F.LLM) {
    const rid = t.responseId[node.i];
    const reject = (rid < 0 && s.llm === true) || (rid >= 0 && seen.has(rid));
    if (!reject) {
      out.push({ node, label: s.subtree });
      if (rid >= 0) seen.add(rid);
      if (llm !== null) llm = true;
    }
  }
  let subtree = s.subtree;
  if (f & F.HAS_AGENT) subtree = f & F.AGENT_OK ? t.agent[node.i] : null;
  const reward = s.reward !== null && f & F.REWARD_SPAN ? true : s.reward;
  for (const c of node.children) findLlmCalls(c, t, { subtree, reward, llm }, seen, out);
}

/** Gives each reward to the newest pending call that finished before it started and has none yet. */
function matchInOrder(nodes: Node[], isCall: Set<Node>, t: EncodedTrace, assigned: Map<Node, number>): void {
  const pending: Node[] = [];
  for (const x of nodes) {
    if (isCall.has(x)) pending.push(x);
    const v = t.reward[x.i];
    if (Number.isNaN(v)) continue;
    for (let k = pending.length - 1; k >= 0; k--) {
      const c = pending[k];
      if (t.end[c.i] > t.start[x.i] || assigned.has(c)) continue;
      assigned.set(c, v);
      break;
    }
  }
}

export function extractCalls(t: EncodedTrace): ExtractedCalls {
  const nodes: Node[] = Array.from({ length: t.n }, (_, i) => ({ i, children: [] }));
  for (let i = 0; i < t.n; i++) if (t.parent[i] >= 0) nodes[t.parent[i]].children.push(nodes[i]);
  const root = nodes[t.root];
  if (t.options & O.REPAIR) repairHierarchy(root, t);
  const found: { node: Node; label: number }[] = [];
  findLlmCalls(
    root,
    t,
    {
      subtree: t.options & O.AGENT_FILTER ? null : -1,
      reward: t.options & O.EXCLUDE_IN_REWARD ? false : null,
      llm: t.options & O.DEDUP ? false : null,
    },
    new Set(),
    found,
  );
  const kept = found.filter(({ node }) => !(t.options & O.SKIP_EMPTY && t.flags[node.i] & F.EMPTY_TOKENS));
  const isCall = new Set(kept.map((k) => k.node));
  const assigned = new Map<Node, number>();
  const all = traverse(root);
  if (t.options & O.FIRST_SIBLING) {
    for (const x of all) matchInOrder(x.children, isCall, t, assigned);
  } else {
    const key = (n: Node) => (Number.isNaN(t.start[n.i]) ? Infinity : t.start[n.i]);
    // Array.prototype.sort is stable; missing start times sort last
    const byStart = [...all].sort((a, b) => (key(a) === key(b) ? 0 : key(a) < key(b) ? -1 : 1));
    matchInOrder(byStart, isCall, t, assigned);
  }
  return {
    calls: Int32Array.from(kept, (k) => k.node.i),
    labels: Int32Array.from(kept, (k) => k.label),
    rewards: Float64Array.from(kept, (k) => assigned.get(k.node) ?? NaN),
  };
}
