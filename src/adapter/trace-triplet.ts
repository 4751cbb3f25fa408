/**
 * TraceTripletAdapter (upstream TracerTraceToTriplet): spans -> trace tree -> repaired hierarchy -> LLM
 * calls (scoped by agent, reward subtree and nesting) -> triplets with rewards; the rules of each step are
 * in docs/adapters.md#tracetripletadapter.
 * Strings and attributes are read here; the tree walk, repair and reward matching run in the Wasm kernel
 * over numeric columns (or the plain-TS reference when `kernels` says so).
 */
import type { Span } from "../types/span.ts";
import { libraryKernels, TRACE_FLAG as F, TRACE_OPT as O, type EncodedTrace, type Kernels } from "../wasm/index.ts";
import { agentName } from "./agent-name.ts";
import { getRewardValue, isRewardOperation } from "./reward.ts";
import { isGenAiLlmCall } from "./semconv.ts";
import { promptTokenIds, responseIdOf, responseTokenIds, spanToTriplet } from "./span-triplet.ts";
import { buildTree, type FlatTree } from "./tree.ts";
import { RewardMatchPolicy, TraceAdapter, type Triplet } from "./types.ts";

export interface TraceTripletOptions {
  /** re-parent mis-nested root children (default true) */
  repairHierarchy?: boolean;
  /** regex searched in span names (default `openai\.chat\.completion`) */
  llmCallMatch?: string | RegExp;
  /**
   * also count spans whose `gen_ai.operation.name` is `chat` or `text_completion` (the GenAI semantic
   * conventions) as LLM calls, whatever their name (default true; false is upstream's rule)
   */
  matchGenAiOperations?: boolean;
  /** only calls inside an agent whose name matches (default: any, label "*") */
  agentMatch?: string | RegExp | null;
  /** ignore LLM calls made inside a reward subtree (default true) */
  excludeLlmCallInReward?: boolean;
  /** drop nested calls without a response id (default true); response-id dedup always applies */
  dedupLlmCall?: boolean;
  rewardMatch?: RewardMatchPolicy;
  /** replaces the last triplet's reward when set */
  finalReward?: number | null;
  /** drop calls whose prompt or response token ids are empty (upstream `_skip_empty_token_spans`) */
  skipEmptyTokenSpans?: boolean;
  /** kernel implementation (default: the library's own Wasm instance, `libraryKernels()`) */
  kernels?: Kernels;
}

const toRegExp = (p: string | RegExp) => (typeof p === "string" ? new RegExp(p) : new RegExp(p.source, p.flags.replace("g", "")));

export class TraceTripletAdapter extends TraceAdapter<Triplet[]> {
  readonly options: Required<Omit<TraceTripletOptions, "kernels" | "agentMatch" | "llmCallMatch">> & {
    llmCallMatch: RegExp;
    agentMatch: RegExp | null;
  };
  private readonly kernels: Kernels | undefined;

  constructor(o: TraceTripletOptions = {}) {
    super();
    this.options = {
      repairHierarchy: o.repairHierarchy ?? true,
      llmCallMatch: toRegExp(o.llmCallMatch ?? "openai\\.chat\\.completion"),
      matchGenAiOperations: o.matchGenAiOperations ?? true,
      agentMatch: o.agentMatch == null ? null : toRegExp(o.agentMatch),
      excludeLlmCallInReward: o.excludeLlmCallInReward ?? true,
      dedupLlmCall: o.dedupLlmCall ?? true,
      rewardMatch: o.rewardMatch ?? RewardMatchPolicy.FIRST_OCCURRENCE,
      finalReward: o.finalReward ?? null,
      skipEmptyTokenSpans: o.skipEmptyTokenSpans ?? false,
    };
    this.kernels = o.kernels;
  }

  /** The tree as numeric columns for the kernel, plus the agent names the labels refer to. */
  encode(tree: FlatTree): { trace: EncodedTrace; agents: string[] } {
    const o = this.options;
    const n = tree.spans.length;
    const agents: string[] = [],
      agentIds = new Map<string, number>();
    const rids = new Map<string, number>();
    const t: EncodedTrace = {
      n,
      root: tree.root,
      parent: tree.parent,
      start: new Float64Array(n),
      end: new Float64Array(n),
      flags: new Int32Array(n),
      agent: new Int32Array(n).fill(-1),
      responseId: new Int32Array(n).fill(-1),
      nResponseIds: 0,
      reward: new Float64Array(n),
      options:
        (o.repairHierarchy ? O.REPAIR : 0) |
        (o.agentMatch ? O.AGENT_FILTER : 0) |
        (o.excludeLlmCallInReward ? O.EXCLUDE_IN_REWARD : 0) |
        (o.dedupLlmCall ? O.DEDUP : 0) |
        (o.skipEmptyTokenSpans ? O.SKIP_EMPTY : 0) |
        (o.rewardMatch === RewardMatchPolicy.FIRST_SIBLING ? O.FIRST_SIBLING : 0),
    };
    tree.spans.forEach((span, i) => {
      t.start[i] = span.start_time ?? NaN;
      t.end[i] = span.end_time ?? NaN;
      const reward = getRewardValue(span);
      t.reward[i] = reward ?? NaN;
      let f = 0;
      if (o.llmCallMatch.test(span.name) || (o.matchGenAiOperations && isGenAiLlmCall(span))) {
        f |= F.LLM;
        const rid = responseIdOf(span);
        if (rid !== null) {
          if (!rids.has(rid)) rids.set(rid, rids.size);
          t.responseId[i] = rids.get(rid)!;
        }
        if (o.skipEmptyTokenSpans && (promptTokenIds(span).length === 0 || responseTokenIds(span).length === 0)) f |= F.EMPTY_TOKENS;
      }
      if (reward !== null || isRewardOperation(span)) f |= F.REWARD_SPAN;
      const name = agentName(span);
      if (name !== null) {
        f |= F.HAS_AGENT;
        if (!o.agentMatch || o.agentMatch.test(name)) f |= F.AGENT_OK;
        if (!agentIds.has(name)) {
          agentIds.set(name, agents.length);
          agents.push(name);
        }
        t.agent[i] = agentIds.get(name)!;
      }
      t.flags[i] = f;
    });
    t.nResponseIds = rids.size;
    return { trace: t, agents };
  }

  adapt(spans: Span[]): Triplet[] {
    const tree = buildTree(spans);
    const { trace, agents } = this.encode(tree);
    const out = (this.kernels ?? libraryKernels()).extractCalls(trace);
    const triplets = Array.from(out.calls, (node, k) => {
      const label = out.labels[k] < 0 ? "*" : agents[out.labels[k]];
      const triplet = spanToTriplet(tree.spans[node], label);
      triplet.reward = Number.isNaN(out.rewards[k]) ? null : out.rewards[k];
      return triplet;
    });
    if (this.options.finalReward !== null && triplets.length > 0) triplets[triplets.length - 1].reward = this.options.finalReward;
    return triplets;
  }
}

/** Upstream's name for the same adapter. */
export { TraceTripletAdapter as TracerTraceToTriplet };
