// What the rollout page reads out of spans: the tree in start order, LLM calls, rewards, annotations.

export const REWARD = "agentlightning.reward";
export const ANNOTATION = "agentlightning.annotation";

export const isReward = (s) => s.name === REWARD || Object.keys(s.attributes ?? {}).some((k) => k.startsWith(`${REWARD}.`));
export const isAnnotation = (s) => s.name === ANNOTATION;
export const isLlmCall = (s) =>
  Object.keys(s.attributes ?? {}).some((k) => k.startsWith("gen_ai.prompt") || k.startsWith("gen_ai.completion"));
export const isError = (s) => s.status?.status_code === "ERROR";

/**
 * The spans as waterfall rows: depth-first from the roots (spans whose parent is not in the list), children
 * in start order; the descendants of `collapsed` ids are left out. Each row: { span, depth, children }.
 */
export function treeRows(spans, collapsed = new Set()) {
  const byId = new Map(spans.map((s) => [s.span_id, s]));
  const children = new Map();
  const roots = [];
  for (const s of spans) {
    if (s.parent_id && byId.has(s.parent_id) && s.parent_id !== s.span_id) {
      if (!children.has(s.parent_id)) children.set(s.parent_id, []);
      children.get(s.parent_id).push(s);
    } else roots.push(s);
  }
  const byStart = (a, b) => a.start_time - b.start_time || a.sequence_id - b.sequence_id;
  const rows = [];
  const seen = new Set();
  const walk = (root) => {
    // An explicit stack, not recursion: a 5,000-deep chain must not overflow.
    const stack = [{ span: root, depth: 0 }];
    while (stack.length > 0) {
      const { span, depth } = stack.pop();
      if (seen.has(span.span_id)) continue;
      seen.add(span.span_id);
      const kids = (children.get(span.span_id) ?? []).sort(byStart);
      rows.push({ span, depth, children: kids.length });
      if (!collapsed.has(span.span_id)) for (let i = kids.length - 1; i >= 0; i--) stack.push({ span: kids[i], depth: depth + 1 });
    }
  };
  for (const root of roots.sort(byStart)) walk(root);
  // Spans whose parents form a cycle have no root above them: each such loop starts at its earliest span.
  for (const s of [...spans].sort(byStart)) if (!seen.has(s.span_id) && !isHiddenBelow(s, collapsed, byId)) walk(s);
  return rows;
}

/** Whether a collapsed span is above `span` (walking up at most once around a cycle). */
function isHiddenBelow(span, collapsed, byId) {
  const visited = new Set();
  for (let p = byId.get(span.parent_id); p && !visited.has(p.span_id); p = byId.get(p.parent_id)) {
    if (collapsed.has(p.span_id)) return true;
    visited.add(p.span_id);
  }
  return false;
}

/** The first and last instants of the spans, in seconds. */
export function timeRange(spans) {
  let start = Number.POSITIVE_INFINITY;
  let end = Number.NEGATIVE_INFINITY;
  for (const s of spans) {
    if (typeof s.start_time === "number") start = Math.min(start, s.start_time);
    const e = typeof s.end_time === "number" ? s.end_time : s.start_time;
    if (typeof e === "number") end = Math.max(end, e);
  }
  return Number.isFinite(start) ? { start, end: Math.max(end, start) } : { start: 0, end: 0 };
}

/** `o[k] = v` as an own property, so that a key such as `__proto__` stays data instead of setting the prototype. */
const setOwn = (o, k, v) => Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });

/** `prefix.N.field` attributes as a list of { field: value } ordered by N. */
function indexed(attributes, prefix) {
  const items = new Map();
  for (const [k, v] of Object.entries(attributes ?? {})) {
    if (!k.startsWith(`${prefix}.`)) continue;
    const rest = k.slice(prefix.length + 1);
    const dot = rest.indexOf(".");
    const n = Number(dot < 0 ? rest : rest.slice(0, dot));
    if (!Number.isInteger(n)) continue;
    if (!items.has(n)) items.set(n, {});
    setOwn(items.get(n), dot < 0 ? "value" : rest.slice(dot + 1), v);
  }
  return [...items.entries()].sort((a, b) => a[0] - b[0]).map(([, item]) => item);
}

/** One LLM call's messages, model and token counts from its gen_ai.* attributes. */
export function llmCall(span) {
  const a = span.attributes ?? {};
  const num = (...keys) => keys.map((k) => a[k]).find((v) => typeof v === "number") ?? null;
  return {
    model: a["gen_ai.response.model"] ?? a["gen_ai.request.model"] ?? null,
    prompt: indexed(a, "gen_ai.prompt"),
    completion: indexed(a, "gen_ai.completion"),
    promptTokens: num("gen_ai.usage.prompt_tokens", "gen_ai.usage.input_tokens"),
    completionTokens: num("gen_ai.usage.completion_tokens", "gen_ai.usage.output_tokens"),
  };
}

/**
 * A message's tool calls, in order: its `tool_calls.N.id|type|name|arguments` fields (what the LLM proxy and
 * the policy server record for an assistant turn that called tools), as [{ id, type, name, arguments }].
 */
export const toolCalls = (message) => indexed(message, "tool_calls");

/** A reward span's dimensions as [{ name, value }]. */
export function rewardValues(span) {
  const a = span.attributes ?? {};
  const dims = indexed(a, REWARD).filter((d) => d.value !== undefined);
  if (dims.length > 0) return dims.map((d, i) => ({ name: d.name ?? (i === 0 ? "reward" : `reward ${i}`), value: d.value }));
  if (a[REWARD] !== undefined) return [{ name: "reward", value: a[REWARD] }];
  return [];
}
