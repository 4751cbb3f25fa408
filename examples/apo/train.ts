/**
 * Tunes the ticket-routing prompt of examples/apo/agent.ts with APO against any OpenAI-compatible
 * endpoint (examples/apo/README.md):
 *
 *   OPENAI_BASE_URL=http://localhost:8000/v1 OPENAI_API_KEY=... npx tsx examples/apo/train.ts
 *
 * The agent, the critic and the editor all call that endpoint; the models are APO_AGENT_MODEL,
 * APO_GRADIENT_MODEL and APO_EDIT_MODEL. Without an endpoint it says what to set and exits with 2.
 */
import { APO, createOpenAiClient, type ApoOptions, type ChatCompletionsClient } from "../../src/algorithm/index.ts";
import { TraceToMessages } from "../../src/adapter/index.ts";
import { platform } from "../../src/platform/index.ts";
import { Trainer } from "../../src/trainer/index.ts";
import type { PromptTemplate } from "../../src/types/index.ts";
import { seedPrompt, TicketAgent } from "./agent.ts";
import { split, type Ticket } from "./tickets.ts";

export const DEFAULT_MODELS = { agent: "gpt-4.1-nano", gradient: "gpt-5-mini", edit: "gpt-4.1-mini" } as const;

export interface ApoExampleOptions {
  baseURL?: string;
  apiKey?: string;
  agentModel?: string;
  /** The critic and editor's client [an openai client for baseURL/apiKey]. */
  client?: ChatCompletionsClient;
  apo?: ApoOptions;
  nRunners?: number;
  tickets?: { train: Ticket[]; val: Ticket[] };
}

export interface ApoExampleResult {
  seedScore: number | null;
  bestScore: number;
  best: PromptTemplate;
  resourcesId: string | null;
}

export async function trainApo(o: ApoExampleOptions = {}): Promise<ApoExampleResult> {
  const baseURL = o.baseURL ?? platform.env("OPENAI_BASE_URL") ?? "https://api.openai.com/v1";
  const apiKey = o.apiKey ?? platform.env("OPENAI_API_KEY") ?? "EMPTY";
  const client = o.client ?? (await createOpenAiClient({ baseURL, apiKey }));
  const apo = new APO<Ticket>(client, {
    gradientModel: platform.env("APO_GRADIENT_MODEL") || DEFAULT_MODELS.gradient,
    applyEditModel: platform.env("APO_EDIT_MODEL") || DEFAULT_MODELS.edit,
    beamWidth: 2,
    branchFactor: 2,
    beamRounds: 2,
    gradientBatchSize: 4,
    valBatchSize: 6,
    pollInterval: 0.2,
    ...o.apo,
  });
  const model = o.agentModel ?? (platform.env("APO_AGENT_MODEL") || DEFAULT_MODELS.agent);
  const trainer = new Trainer({
    algorithm: apo,
    nRunners: o.nRunners ?? 4,
    adapter: new TraceToMessages(),
    runner: { type: "LitAgentRunner", poll_interval: 0.05 },
    initialResources: { main_llm: { resource_type: "llm", endpoint: baseURL, model, api_key: apiKey }, prompt: seedPrompt },
  });
  const { train, val } = o.tickets ?? split();
  await trainer.fit(new TicketAgent(), train, { valDataset: val });
  return {
    seedScore: apo.candidates[0]?.score ?? null,
    bestScore: apo.getBestScore(),
    best: apo.getBestPrompt(),
    resourcesId: apo.bestResourcesId,
  };
}

const argv = (globalThis as { process?: { argv: string[] } }).process?.argv ?? [];
if ((argv[1] ?? "").endsWith("examples/apo/train.ts")) {
  if (!platform.env("OPENAI_BASE_URL") && !platform.env("OPENAI_API_KEY")) {
    console.error(
      [
        "examples/apo needs an OpenAI-compatible endpoint. Set:",
        "  OPENAI_BASE_URL     the endpoint, e.g. http://localhost:8000/v1 (default: https://api.openai.com/v1)",
        "  OPENAI_API_KEY      its key (any value for a server without keys)",
        "and optionally the models (defaults in brackets):",
        `  APO_AGENT_MODEL     the model that routes tickets [${DEFAULT_MODELS.agent}]`,
        `  APO_GRADIENT_MODEL  the critic [${DEFAULT_MODELS.gradient}]`,
        `  APO_EDIT_MODEL      the editor [${DEFAULT_MODELS.edit}]`,
      ].join("\n"),
    );
    platform.exit(2);
  }
  const r = await trainApo();
  console.log(`seed prompt: ${r.seedScore?.toFixed(3) ?? "not scored"} on the validation tickets`);
  console.log(`best prompt: ${r.bestScore.toFixed(3)} (written back as resources ${r.resourcesId}):\n${r.best.template}`);
}
