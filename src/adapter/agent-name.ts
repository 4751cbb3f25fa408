/** agent_name(span): the agent a span stands for, across frameworks; first rule wins (docs/adapters.md#agent-names). */
import type { Span } from "../types/span.ts";

export function agentName(span: Span): string | null {
  const a = span.attributes as Record<string, unknown>;
  const str = (k: string): string | null => (typeof a[k] === "string" ? (a[k] as string) : a[k] == null ? null : String(a[k]));
  if (a["agent.name"] != null) return str("agent.name"); // OpenAI Agents SDK
  if (a["agentops.span.kind"] === "agent" && a["operation.name"] != null) return str("operation.name");
  if (a["recipient_agent_type"] != null) return str("recipient_agent_type"); // AutoGen
  if (a["langchain.chain.type"] != null) return str("langchain.chain.type"); // LangGraph
  if (a["executor.id"] != null) return str("executor.id"); // agent-framework
  if (a["type"] === "agent" && a["agentlightning.operation.input.name"] != null) return str("agentlightning.operation.input.name"); // Weave
  if (span.name.startsWith("langchain.Chain.") && a["lc_name"] != null) return str("lc_name");
  return null;
}
