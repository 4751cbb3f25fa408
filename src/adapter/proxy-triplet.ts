/**
 * LlmProxyTraceToTriplet: triplets from the LLM proxy's spans, ordered only by sequence id (proxy clocks
 * may be skewed). Token ids may be arrays or Python-repr strings (docs/adapters.md#llmproxytracetotriplet).
 * With `agentMatch`, only the calls of agents whose name matches are kept (the name the request gave,
 * `gen_ai.agent.name`; docs/agents.md#training-only-some-agents), and rewards go to those calls.
 */
import type { Span } from "../types/span.ts";
import { agentMatcher, agentName } from "./agent-name.ts";
import { isIntArray, parsePythonLiteral } from "./python-literal.ts";
import { getRewardValue } from "./reward.ts";
import { TraceAdapter, type Triplet } from "./types.ts";

const intList = (v: unknown): number[] => {
  const p = parsePythonLiteral(v);
  return isIntArray(p) ? p : [];
};

/** Prompt and response token ids of one proxy span, by its name (raw_gen_ai_request or litellm_request). */
export function proxyTokenIds(span: Span): { prompt: number[]; response: number[] } {
  const a = span.attributes as Record<string, unknown>;
  if (span.name === "raw_gen_ai_request") {
    const prompt = intList(a["llm.hosted_vllm.prompt_token_ids"]);
    const nested = parsePythonLiteral(a["llm.hosted_vllm.response_token_ids"]);
    let response = Array.isArray(nested) && isIntArray(nested[0]) ? (nested[0] as number[]) : [];
    if (response.length === 0) {
      const choices = parsePythonLiteral(a["llm.hosted_vllm.choices"]);
      const first = Array.isArray(choices) ? (choices[0] as Record<string, unknown> | undefined) : undefined;
      if (first && typeof first === "object" && isIntArray(first.token_ids)) response = first.token_ids;
    }
    return { prompt, response };
  }
  if (span.name === "litellm_request") return { prompt: intList(a.prompt_token_ids), response: intList(a.response_token_ids) };
  return { prompt: [], response: [] };
}

const nonEmptyString = (v: unknown): string | null => (typeof v === "string" && v !== "" ? v : null);

export interface LlmProxyTraceToTripletOptions {
  /** Keep only the calls of agents whose name matches (a regex searched in the name); default: every call. */
  agentMatch?: string | RegExp | null;
}

export class LlmProxyTraceToTriplet extends TraceAdapter<Triplet[]> {
  /** The pattern as given (upstream's `agent_match`), or null. */
  readonly agentMatch: string | RegExp | null;
  private readonly keep: ((name: string | null) => boolean) | null;

  constructor(o: LlmProxyTraceToTripletOptions = {}) {
    super();
    this.agentMatch = o.agentMatch ?? null;
    this.keep = this.agentMatch === null ? null : agentMatcher(this.agentMatch);
  }

  adapt(spans: Span[]): Triplet[] {
    const sorted = spans
      .map((s, i) => ({ s, i }))
      .sort((x, y) => x.s.sequence_id - y.s.sequence_id || (x.s.start_time ?? 0) - (y.s.start_time ?? 0) || x.i - y.i)
      .map((x) => x.s);
    const seen = new Set<string>();
    const items: { seq: number; prompt: number[]; response: number[]; id: string | null; agent: string | null; reward: number | null }[] =
      [];
    for (const s of sorted) {
      const { prompt, response } = proxyTokenIds(s);
      if (prompt.length === 0 || response.length === 0) continue;
      const agent = agentName(s);
      if (this.keep !== null && !this.keep(agent)) continue;
      const id = nonEmptyString(s.attributes["gen_ai.response.id"]) ?? nonEmptyString(s.attributes["llm.hosted_vllm.id"]);
      if (id !== null) {
        if (seen.has(id)) continue; // the first span of a request wins
        seen.add(id);
      }
      items.push({ seq: s.sequence_id, prompt, response, id, agent, reward: null });
    }
    items.sort((a, b) => a.seq - b.seq); // stable
    // each reward goes to the latest not-yet-rewarded item with a strictly smaller sequence id
    for (const s of sorted) {
      const v = getRewardValue(s);
      if (v === null) continue;
      for (let k = items.length - 1; k >= 0; k--) {
        if (items[k].seq < s.sequence_id && items[k].reward === null) {
          items[k].reward = v;
          break;
        }
      }
    }
    return items.map((it) => ({
      prompt: { token_ids: it.prompt },
      response: { token_ids: it.response },
      reward: it.reward,
      metadata: it.agent === null ? { response_id: it.id } : { response_id: it.id, agent_name: it.agent },
    }));
  }
}
