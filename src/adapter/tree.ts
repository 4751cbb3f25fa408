/**
 * TraceTree construction as flat columns: the spans plus the synthetic ones (a virtual node per missing
 * parent, a virtual root when there are several roots) and a parent index per node. Children are implied
 * in index order, which is input order, as upstream (docs/adapters.md#tracetripletadapter, step 1).
 */
import { ValidationError } from "../types/errors.ts";
import { AGL_VIRTUAL, VIRTUAL_ROOT_ID } from "../types/semconv.ts";
import { spanFromAttributes, type Span } from "../types/span.ts";

export interface FlatTree {
  /** input spans first (same indices), then virtual nodes, then the virtual root if any */
  spans: Span[];
  /** the tree id of each node (span_id, or "virtual-root") */
  ids: string[];
  parent: Int32Array;
  root: number;
}

const minOf = (xs: (number | null)[]) => {
  const v = xs.filter((x): x is number => x !== null);
  return v.length ? Math.min(...v) : null;
};
const maxOf = (xs: (number | null)[]) => {
  const v = xs.filter((x): x is number => x !== null);
  return v.length ? Math.max(...v) : null;
};

export function buildTree(input: readonly Span[]): FlatTree {
  if (input.length === 0) throw new ValidationError("Cannot build a trace tree from an empty list of spans");
  const spans = [...input];
  const ids = spans.map((s) => s.span_id);
  const index = new Map<string, number>();
  spans.forEach((s, i) => {
    if (!index.has(s.span_id)) index.set(s.span_id, i);
  });

  // parents that are referenced but absent become virtual nodes, in first-reference order
  const missing = new Map<string, number[]>();
  for (let i = 0; i < input.length; i++) {
    const p = input[i].parent_id;
    if (p !== null && !index.has(p)) {
      const kids = missing.get(p);
      if (kids) kids.push(i);
      else missing.set(p, [i]);
    }
  }
  for (const [id, kids] of missing) {
    const first = input[kids[0]];
    index.set(id, spans.length);
    ids.push(id);
    spans.push(
      spanFromAttributes({
        name: AGL_VIRTUAL,
        span_id: id,
        parent_id: null,
        attributes: {},
        rollout_id: first.rollout_id,
        attempt_id: first.attempt_id,
        sequence_id: first.sequence_id,
        trace_id: first.trace_id,
        start_time: minOf(kids.map((k) => input[k].start_time)),
        end_time: maxOf(kids.map((k) => input[k].end_time)),
      }),
    );
  }
  const parent = new Int32Array(spans.length + 1).fill(-1);
  for (let i = 0; i < input.length; i++) {
    const p = input[i].parent_id;
    if (p !== null) parent[i] = index.get(p)!;
  }
  const roots: number[] = [];
  for (let i = 0; i < spans.length; i++) if (parent[i] === -1) roots.push(i);
  if (roots.length === 0) throw new ValidationError("The spans have no root (every span has a parent)");
  if (roots.length === 1) return { spans, ids, parent: parent.subarray(0, spans.length), root: roots[0] };

  const firstRoot = spans[roots[0]],
    lastRoot = spans[roots[roots.length - 1]];
  const root = spans.length;
  for (const r of roots) parent[r] = root;
  spans.push(
    spanFromAttributes({
      name: VIRTUAL_ROOT_ID,
      rollout_id: firstRoot.rollout_id,
      attempt_id: firstRoot.attempt_id,
      sequence_id: firstRoot.sequence_id,
      trace_id: firstRoot.trace_id,
      start_time: firstRoot.start_time,
      end_time: lastRoot.end_time, // upstream: the LAST root's end, not the max
    }),
  );
  ids.push(VIRTUAL_ROOT_ID);
  return { spans, ids, parent, root };
}
