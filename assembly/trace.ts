// Trace-tree structure (trace-train.md §5.4-5.7): children lists, hierarchy repair, the depth-first search
// for LLM calls with agent / reward / nested-call scoping, and reward matching. Strings never cross: the
// caller encodes each node as numbers (parent index, times, flag bits, interned agent and response ids).

export const F_LLM: i32 = 1;          // span name matches the LLM-call pattern
export const F_REWARD_SPAN: i32 = 2;  // is_reward_span (a reward value, or an AGL reward operation)
export const F_HAS_AGENT: i32 = 4;    // agent_name(node) is not null
export const F_AGENT_OK: i32 = 8;     // ... and it passes the agent filter
export const F_EMPTY_TOKENS: i32 = 16; // prompt or response token ids are empty

export const O_REPAIR: i32 = 1;
export const O_AGENT_FILTER: i32 = 2;  // an agent pattern is set: calls outside a matching agent are ignored
export const O_EXCLUDE_IN_REWARD: i32 = 4;
export const O_DEDUP: i32 = 8;
export const O_SKIP_EMPTY: i32 = 16;
export const O_FIRST_SIBLING: i32 = 32; // reward policy; otherwise first_occurrence

const NONE: i32 = -1;
const SUB_NULL: i32 = -2; // withinSubtree == null
const SUB_STAR: i32 = -1; // withinSubtree == "*"

@inline function gi(p: usize, i: i32): i32 { return load<i32>(p + (<usize>i << 2)); }
@inline function si(p: usize, i: i32, v: i32): void { store<i32>(p + (<usize>i << 2), v); }
@inline function gd(p: usize, i: i32): f64 { return load<f64>(p + (<usize>i << 3)); }
@inline function sd(p: usize, i: i32, v: f64): void { store<f64>(p + (<usize>i << 3), v); }

/** i32 arrays of length n carved from scratch. */
const SCRATCH_ARRAYS: i32 = 16;
export function traceScratchBytes(n: i32, nResponseIds: i32): i32 {
  return SCRATCH_ARRAYS * (n << 2) + ((nResponseIds + 3) & ~3);
}

// Children as doubly linked lists so that a node can move in O(1) while order is kept.
let first: usize = 0, last: usize = 0, next: usize = 0, prev: usize = 0, stack: usize = 0;

function unlink(parent: i32, c: i32): void {
  const p = gi(prev, c), nx = gi(next, c);
  if (p == NONE) si(first, parent, nx); else si(next, p, nx);
  if (nx == NONE) si(last, parent, p); else si(prev, nx, p);
  si(prev, c, NONE); si(next, c, NONE);
}

function append(parent: i32, c: i32): void {
  const l = gi(last, parent);
  si(prev, c, l); si(next, c, NONE);
  if (l == NONE) si(first, parent, c); else si(next, l, c);
  si(last, parent, c);
}

function childCount(x: i32): i32 {
  let k = 0;
  for (let c = gi(first, x); c != NONE; c = gi(next, c)) k++;
  return k;
}

/** Pre-order of the subtree at `root` into `out`, skipping the subtree of `skip`; returns its length. */
function preorder(root: i32, skip: i32, out: usize): i32 {
  let sp = 0, len = 0;
  si(stack, sp++, root);
  while (sp > 0) {
    const x = gi(stack, --sp);
    si(out, len++, x);
    if (x == skip) continue;
    for (let c = gi(last, x); c != NONE; c = gi(prev, c)) si(stack, sp++, c);
  }
  return len;
}

/** §5.4 repair_hierarchy. A span is never moved under its own descendant (upstream would orphan it). */
function repair(root: i32, start: usize, end: usize, order: usize, snap: usize): void {
  let node = root;
  while (childCount(node) == 1) node = gi(first, node);
  let k = 0;
  for (let c = gi(first, node); c != NONE; c = gi(next, c)) si(snap, k++, c);
  for (let j = 0; j < k; j++) {
    if (childCount(node) == 1) break;
    const r = gi(snap, j);
    const rs = gd(start, r), re = gd(end, r);
    const len = preorder(node, r, order);
    let best = NONE, bestD = Infinity;
    for (let q = 1; q < len; q++) {
      const c = gi(order, q);
      if (c == r) continue;
      const cs = gd(start, c), ce = gd(end, c);
      if (cs <= rs && ce >= re) {
        const d = (ce - re) + (rs - cs);
        if (d > 0 && d < bestD) { best = c; bestD = d; }
      }
    }
    if (best != NONE) { unlink(node, r); append(best, r); }
  }
}

/** Stable merge sort of idx[0..n) by key (NaN last), using tmp. */
function sortByKey(idx: usize, tmp: usize, n: i32, key: usize): void {
  for (let width = 1; width < n; width <<= 1) {
    for (let lo = 0; lo < n; lo += width << 1) {
      const mid = min(lo + width, n), hi = min(lo + (width << 1), n);
      let a = lo, b = mid, o = lo;
      while (a < mid && b < hi) {
        const ka = gd(key, gi(idx, a)), kb = gd(key, gi(idx, b));
        // take from the right only when strictly smaller (stability); NaN sorts last
        const takeB = !isNaN(kb) && (isNaN(ka) || kb < ka);
        si(tmp, o++, takeB ? gi(idx, b++) : gi(idx, a++));
      }
      while (a < mid) si(tmp, o++, gi(idx, a++));
      while (b < hi) si(tmp, o++, gi(idx, b++));
    }
    memory.copy(idx, tmp, <usize>n << 2);
  }
}

/** Pushes `x` if it is a call, then gives its reward (if any) to the newest finished unrewarded pending call. */
@inline function visit(x: i32, isCall: usize, rewarded: usize, pending: usize, top: i32,
  start: usize, end: usize, reward: usize, outReward: usize): i32 {
  if (gi(isCall, x) != 0) si(pending, top++, x);
  const v = gd(reward, x);
  if (!isNaN(v)) {
    const xs = gd(start, x);
    for (let k = top - 1; k >= 0; k--) {
      const c = gi(pending, k);
      if (gd(end, c) > xs || gi(rewarded, c) != 0) continue;
      si(rewarded, c, 1);
      sd(outReward, c, v);
      break;
    }
  }
  return top;
}

/**
 * Builds the tree from `parent` (one root, -1), optionally repairs it, finds the LLM calls (§5.5) and
 * matches rewards (§5.7). Writes, in DFS order, each kept call's node index, agent label (-1 = "*",
 * otherwise the caller's agent id) and reward (NaN = none). `outReward` is an f64 array of length n
 * indexed by node (read back per call). Returns the number of calls.
 */
export function extractCalls(n: i32, root: i32, parent: usize, start: usize, end: usize, flags: usize,
  agent: usize, rid: usize, nRid: i32, reward: usize, opts: i32, scratch: usize,
  outCalls: usize, outLabels: usize, outReward: usize): i32 {
  const bytes = <usize>n << 2;
  first = scratch; last = first + bytes; next = last + bytes; prev = next + bytes; stack = prev + bytes;
  const order = stack + bytes, tmp = order + bytes, sub = tmp + bytes, rew = sub + bytes, llm = rew + bytes;
  const isCall = llm + bytes, rewarded = isCall + bytes, pending = rewarded + bytes, snap = pending + bytes;
  const seen = snap + 2 * bytes;
  memory.fill(first, 0xff, 4 * bytes); // first/last/next/prev = NONE
  memory.fill(isCall, 0, 2 * bytes);
  memory.fill(seen, 0, <usize>nRid);
  for (let i = 0; i < n; i++) {
    const p = gi(parent, i);
    if (p >= 0) append(p, i);
    sd(outReward, i, NaN);
  }
  if (opts & O_REPAIR) repair(root, start, end, order, snap);

  // §5.5: DFS carrying (withinSubtree, withinReward, withinLlmCall); each node's inherited state is stored.
  si(sub, root, opts & O_AGENT_FILTER ? SUB_NULL : SUB_STAR);
  si(rew, root, opts & O_EXCLUDE_IN_REWARD ? 0 : -1);
  si(llm, root, opts & O_DEDUP ? 0 : -1);
  let sp = 0, len = 0, nCalls = 0;
  si(stack, sp++, root);
  while (sp > 0) {
    const x = gi(stack, --sp);
    si(order, len++, x);
    const f = gi(flags, x);
    let sx = gi(sub, x), rx = gi(rew, x), lx = gi(llm, x);
    if (sx != SUB_NULL && rx != 1 && (f & F_LLM)) {
      const r = gi(rid, x);
      const reject = (r < 0 && lx == 1) || (r >= 0 && load<u8>(seen + <usize>r) != 0);
      if (!reject) {
        if (!((opts & O_SKIP_EMPTY) && (f & F_EMPTY_TOKENS))) {
          si(outCalls, nCalls, x);
          si(outLabels, nCalls, sx);
          nCalls++;
          si(isCall, x, 1);
        }
        if (r >= 0) store<u8>(seen + <usize>r, 1);
        if (lx != -1) lx = 1;
      }
    }
    if (f & F_HAS_AGENT) sx = f & F_AGENT_OK ? gi(agent, x) : SUB_NULL;
    if (rx != -1 && (f & F_REWARD_SPAN)) rx = 1;
    for (let c = gi(last, x); c != NONE; c = gi(prev, c)) {
      si(sub, c, sx); si(rew, c, rx); si(llm, c, lx);
      si(stack, sp++, c);
    }
  }

  // §5.7 reward matching.
  if (opts & O_FIRST_SIBLING) {
    for (let j = 0; j < len; j++) {
      let top = 0;
      for (let c = gi(first, gi(order, j)); c != NONE; c = gi(next, c)) {
        top = visit(c, isCall, rewarded, pending, top, start, end, reward, outReward);
      }
    }
  } else {
    sortByKey(order, tmp, len, start);
    let top = 0;
    for (let j = 0; j < len; j++) {
      top = visit(gi(order, j), isCall, rewarded, pending, top, start, end, reward, outReward);
    }
  }
  return nCalls;
}
