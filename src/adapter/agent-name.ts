/** agent_name(span): the agent a span stands for, across frameworks; first rule wins (docs/adapters.md#agent-names). */
import { GEN_AI_AGENT_NAME } from "../types/semconv.ts";
import type { Span } from "../types/span.ts";

/**
 * An `agentMatch` pattern as a test of agent names: a regular expression searched in the name (upstream's
 * `re.search`, so `write` also matches `rewrite`; anchor it, `^write$`, for one agent). No name never matches.
 */
export function agentMatcher(pattern: string | RegExp): (name: string | null) => boolean {
  const re = typeof pattern === "string" ? new RegExp(pattern) : new RegExp(pattern.source, pattern.flags.replace(/[gy]/g, ""));
  return (name) => name !== null && re.test(name);
}

export function agentName(span: Span): string | null {
  const a = span.attributes as Record<string, unknown>;
  const str = (k: string): string | null => (typeof a[k] === "string" ? (a[k] as string) : a[k] == null ? null : String(a[k]));
  if (a["agent.name"] != null) return str("agent.name"); // OpenAI Agents SDK
  if (a[GEN_AI_AGENT_NAME] != null) return str(GEN_AI_AGENT_NAME); // the policy server's and the LLM proxy's spans (x-agent-name)
  if (a["agentops.span.kind"] === "agent" && a["operation.name"] != null) return str("operation.name");
  if (a["recipient_agent_type"] != null) return str("recipient_agent_type"); // AutoGen
  if (a["langchain.chain.type"] != null) return str("langchain.chain.type"); // LangGraph
  if (a["executor.id"] != null) return str("executor.id"); // agent-framework
  if (a["type"] === "agent" && a["agentlightning.operation.input.name"] != null) return str("agentlightning.operation.input.name"); // Weave
  if (span.name.startsWith("langchain.Chain.") && a["lc_name"] != null) return str("lc_name");
  return null;
}
