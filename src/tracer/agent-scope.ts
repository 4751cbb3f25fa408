/**
 * Which agent makes an LLM call, for selective optimisation (docs/agents.md#training-only-some-agents).
 * The policy server and the LLM proxy record the call, so the name must travel with the request: code run
 * inside `withAgentName(name, fn)` is that agent's, and a client built with `agentNameFetch()` sends the
 * name as the `x-agent-name` header on each call made from inside it. The scope lives in the
 * OpenTelemetry context (tracer/context.ts), which follows `await`, timers and streams, whatever the
 * framework does with its own context in between.
 */
import { context, createContextKey } from "@opentelemetry/api";
import { AGENT_NAME_HEADER, ValidationError } from "../types/index.ts";
import { installContextManager } from "./context.ts";

const AGENT_NAME_KEY = createContextKey("agentlightning.agent_name");

/** The longest agent name accepted (the policy server refuses longer ones with a 400). */
export const MAX_AGENT_NAME_LENGTH = 256;

/** Throws a ValidationError naming `where` unless `name` is a usable agent name. */
export function checkAgentName(name: unknown, where: (string | number)[] = ["name"]): string {
  if (typeof name !== "string" || name === "")
    throw new ValidationError(`${where.join(".")}: an agent name must be a non-empty string`, where);
  if (name.length > MAX_AGENT_NAME_LENGTH)
    throw new ValidationError(`${where.join(".")}: an agent name must have at most ${MAX_AGENT_NAME_LENGTH} characters`, where);
  // it travels as a header value: no control characters (a CR/LF would split the header)
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the characters refused
  if (/[\u0000-\u001f\u007f]/.test(name))
    throw new ValidationError(`${where.join(".")}: an agent name must not contain control characters`, where);
  return name;
}

/** Runs `fn` as agent `name`: LLM calls made inside it (through `agentNameFetch`) carry the name. */
export function withAgentName<T>(name: string, fn: () => T): T {
  installContextManager();
  return context.with(context.active().setValue(AGENT_NAME_KEY, checkAgentName(name)), fn);
}

/** The agent whose scope the caller runs in, or null. */
export function currentAgentName(): string | null {
  const v = context.active().getValue(AGENT_NAME_KEY);
  return typeof v === "string" ? v : null;
}

/**
 * A fetch that adds `x-agent-name: <current agent>` to requests made inside `withAgentName` (and leaves
 * a header the caller set alone). Give it to the OpenAI-compatible client: `new OpenAI({ fetch })`,
 * LangChain's `new ChatOpenAI({ configuration: { fetch } })`.
 */
export function agentNameFetch(base: typeof fetch = (input, init) => fetch(input, init)): typeof fetch {
  return (input, init) => {
    const name = currentAgentName();
    if (name === null) return base(input, init);
    const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
    if (!headers.has(AGENT_NAME_HEADER)) headers.set(AGENT_NAME_HEADER, name);
    return base(input, { ...init, headers });
  };
}
